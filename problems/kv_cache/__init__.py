"""Problems of the KV Cache family."""
