"""The command-line interface (the only layer that prints, parses arguments or exits)."""
