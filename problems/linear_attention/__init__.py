"""Problems of the Linear Attention family."""
