"""The web layer on Starlette: ``POST /translate``, ``POST /attention`` and the page at ``/``.

Every bad request is one ``{"error": "..."}`` line with a 4xx status (too big: 413, before it
is all read). Decoding runs in one worker thread, so the event loop keeps answering.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from translate.serving.service import Refused, Service

PAGE = Path(str(importlib.resources.files("translate"))) / "resources" / "serve"


@dataclass(frozen=True)
class Limits:
    max_sentences: int
    max_body_bytes: int


def create_app(service: Service, limits: Limits) -> Starlette:
    # One thread: decoding is one request at a time anyway (the service's lock), and a plain
    # executor hands a request over faster than anyio's pool (0.1 ms of a 7 ms request).
    decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")

    async def decoded(fn, *args) -> JSONResponse:
        return JSONResponse(await asyncio.get_running_loop().run_in_executor(decoder, fn, *args))

    async def refused(request: Request, err: Refused) -> JSONResponse:
        return JSONResponse({"error": str(err)}, status_code=err.status)

    async def page(request: Request) -> FileResponse:
        return FileResponse(PAGE / "index.html")

    async def translate(request: Request) -> JSONResponse:
        keys = {"text", "alignments", "nbest"}
        body = await json_body(request, limits.max_body_bytes, keys)
        texts = sentences(body.get("text"), limits.max_sentences)
        alignments, nbest = body.get("alignments", False), body.get("nbest")
        if not isinstance(alignments, bool):
            raise Refused(f'"alignments" must be true or false, not {alignments!r}')
        if nbest is not None and (type(nbest) is not int or nbest < 1):
            raise Refused(f'"nbest" must be a whole number >= 1, not {nbest!r}')
        return await decoded(service.translate, texts, alignments, nbest)

    async def attention(request: Request) -> JSONResponse:
        body = await json_body(request, limits.max_body_bytes, {"text"})
        text = body.get("text")
        if not isinstance(text, str):
            raise Refused(f'"text" must be one sentence, a string; got {_kind(text)}')
        if not text.strip():
            raise Refused('"text" is empty; send a sentence to translate')
        return await decoded(service.attention, text)

    routes = [
        Route("/", page),
        Route("/translate", translate, methods=["POST"]),
        Route("/attention", attention, methods=["POST"]),
        Mount("/static", StaticFiles(directory=PAGE), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={Refused: refused})


async def json_body(request: Request, max_bytes: int, keys: set[str]) -> dict:
    """The request's JSON object, refused over ``max_bytes`` (counted as it arrives) or bad."""
    too_big = Refused(f"the body is over {max_bytes} bytes (max_body_bytes)", 413)
    if int(request.headers.get("content-length") or 0) > max_bytes:
        raise too_big
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > max_bytes:
            raise too_big
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Refused("the body is not UTF-8 text; send JSON in UTF-8") from None
    except json.JSONDecodeError as err:
        raise Refused(f"the body is not valid JSON ({err})") from None
    if not isinstance(body, dict):
        raise Refused(f'send a JSON object such as {{"text": ...}}, not {_kind(body)}')
    unknown = sorted(set(body) - keys)
    if unknown:
        raise Refused(f"unknown key {unknown[0]!r}; this endpoint takes {sorted(keys)}")
    return body


def sentences(text, max_sentences: int) -> list[str]:
    """``text`` checked: a list of 1 to ``max_sentences`` strings, none blank."""
    if not isinstance(text, list):
        raise Refused(f'"text" must be a list of sentences (strings); got {_kind(text)}')
    if not text:
        raise Refused('"text" is an empty list; send at least one sentence')
    if len(text) > max_sentences:
        raise Refused(
            f"{len(text)} sentences in one request; this server takes at most {max_sentences} "
            "(max_sentences): split them",
            413,
        )
    for n, item in enumerate(text):
        if not isinstance(item, str):
            raise Refused(f'"text"[{n}] must be a string; got {_kind(item)}')
        if not item.strip():
            raise Refused(f'"text"[{n}] is empty; send a sentence to translate')
    return text


def _kind(value) -> str:
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number"}
    names |= {str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)
