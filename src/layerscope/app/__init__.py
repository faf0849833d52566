"""The verbs: one module per command, each taking one typed request and returning one typed result.

``estimate``, ``simulate`` (and room for ``plan`` and ``serving``) orchestrate the layers below;
the CLI parses options into a request, calls the verb and renders its result.
"""
