"""``python -m layerscope`` runs the CLI."""

from layerscope.cli.app import main

main()
