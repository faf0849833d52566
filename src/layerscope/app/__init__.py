"""The verbs: one module per command, each taking one typed request and returning one typed result.

``estimate``, ``simulate``, ``capture``, ``analyze`` (query, analyze, compare), ``records`` (workloads, verify),
``catalogs`` (models, hardware), ``calibrate``, ``validate`` and ``demo`` orchestrate the layers below (and
``plan`` and ``serving`` will join them). Each verb module has the same shape: a request model (shared parts in
:mod:`layerscope.app.requests`), a verb function ``verb(request) -> Result``, where the arrays are needed a
``run_*``/``*_raw`` function returning them, and ``result_of`` turning those into the pydantic result whose dump is
the command's ``--json`` (schemas: :mod:`layerscope.app.schema`, docs/schema). The CLI parses options into a
request, calls the verb and renders the result.
"""
