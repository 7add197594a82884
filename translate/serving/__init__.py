"""``python -m translate.serve``: a loaded model behind a small web API and a page.

:mod:`.service` decodes (one request at a time) and reads heads, :mod:`.attention` turns one
sentence's attention into what the page draws, :mod:`.app` is the web layer: routes, limits and
one-line errors. The page's files are ``translate/resources/serve/``.
"""
