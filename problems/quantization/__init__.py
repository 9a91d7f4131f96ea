"""Problems of the Quantization family."""
