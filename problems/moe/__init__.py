"""Problems of the MoE family."""
