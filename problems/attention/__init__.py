"""Problems of the Attention family."""
