"""Bad inputs through the installed ``layerscope``: exit 2, one ``error:`` line, nothing written (issue #24)."""
