"""``python -m translate.serve``: a loaded model behind a small web API and a page (:mod:`.app`
the web layer, :mod:`.service` decoding, :mod:`.attention` what the page draws)."""
