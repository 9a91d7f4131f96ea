"""The `mkb` command line, configuration and the Textual app wiring."""
