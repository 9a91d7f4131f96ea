"""Problems of the MLP & Norm family."""
