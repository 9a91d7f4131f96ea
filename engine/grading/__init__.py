"""The grading contract, the cheat-proof worker, and its backends (local, http, harbor)."""
