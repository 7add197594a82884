"""The page in a real headless Chromium: ``/?text=...`` translates on load and draws a grid of
head heatmaps (checked in its DOM and on a screenshot). Skips only where no Chromium is found
(``.ci/run`` installs it from the system's package manager)."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import threading
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from conftest import compose_config

uvicorn = pytest.importorskip("uvicorn", reason='no serve extra: pip install -e ".[serve]"')

from matplotlib.image import imread  # noqa: E402

from translate.schema.commands import ServeCommand  # noqa: E402
from translate.serve import bound_socket, load_service  # noqa: E402
from translate.serving.app import Limits, create_app  # noqa: E402
from translate.serving.service import Service  # noqa: E402
from translate.settings import command_settings  # noqa: E402

TEXT = "Zwei Männer spielen Fußball im Park."
WINDOW = (1600, 1300)
BROWSER_S = 120  # a loaded 2-core machine starts Chromium slowly


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium on PATH (chromium, chromium-browser): apt-get install chromium")


@pytest.fixture(scope="module")
def service(trained_run):
    command = command_settings(
        ServeCommand, compose_config("serve", [f"checkpoint={trained_run[1]['checkpoint']}"])
    )
    return load_service(command)


@contextlib.contextmanager
def served(service):
    """``service``'s app served by uvicorn in a thread of this process, on a free port."""
    sock = bound_socket("127.0.0.1", 0)
    app = create_app(service, Limits(max_sentences=8, max_body_bytes=65536))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/?text={urllib.parse.quote(TEXT)}"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def url(service):
    with served(service) as address:
        yield address


def browse(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        chromium(),
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--hide-scrollbars",
        "--virtual-time-budget=30000",  # paused while the page waits for /attention
        *args,
        url,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_the_page_shows_the_translation_and_a_grid_of_heads(url, service, tmp_path):
    dom = browse(url, tmp_path, "--dump-dom").stdout
    expected = service.translator.translate([TEXT])[0]
    assert 'data-state="ready"' in dom, dom[-3000:]
    translation = re.search(r'<p id="translation">(.*?)</p>', dom)[1]
    assert translation == expected.replace("&", "&amp;").replace("<", "&lt;")
    cards = re.findall(r'<div class="head( best)?" data-head="(\d+)">.*?<canvas', dom)
    heads = service.translator.model.num_heads
    assert [int(n) for _, n in cards] == list(range(heads))
    assert [best for best, _ in cards].count(" best") == 1  # the page opens at the best's layer
    assert "lowest mean entropy" in dom  # says how it chose the best head


def test_without_heads_the_page_translates_and_says_why(service, tmp_path):
    """A CTranslate2 export served alone: the translation, the 501's line, no grid."""
    with served(Service(service.loaded, None, None)) as address:
        dom = browse(address, tmp_path, "--dump-dom").stdout
    expected = service.translator.translate([TEXT])[0]
    translation = re.search(r'<p id="translation">(.*?)</p>', dom)[1]
    assert translation == expected.replace("&", "&amp;").replace("<", "&lt;")
    assert 'data-state="no-heads"' in dom and "no per-head attention weights" in dom
    assert '<div id="grid" hidden=""></div>' in dom


def test_the_screenshot_shows_heatmaps(url, tmp_path):
    shot = tmp_path / "page.png"
    browse(url, tmp_path, f"--screenshot={shot}")
    pixels = imread(shot)  # (height, width, RGB(A)) in [0, 1]
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    # Below the form, the translation and the controls, the grid: pixels of the heatmaps' scale.
    cells = on_the_scale(pixels[400:])
    assert cells.sum() > 10_000, f"no heatmap drawn below the controls; see {shot}"


# app.js's color(): weight 0 to 1 through these RGB stops.
STOPS = np.array([[247, 251, 255], [107, 174, 214], [8, 48, 107]])


def on_the_scale(pixels: np.ndarray) -> np.ndarray:
    """``(rows, columns)``: True where the pixel is within 2/255 per channel of a colour of
    the page's scale (white, the greys of its text and its backgrounds are not)."""
    x = np.linspace(0, len(STOPS) - 1, 2001)  # (N,) positions along the stops
    ramp = np.stack([np.interp(x, range(len(STOPS)), STOPS[:, c]) for c in range(3)], 1)
    near = np.round(ramp).astype(int)[:, None, :] + np.mgrid[-2:3, -2:3, -2:3].reshape(3, -1).T
    rgb = np.round(pixels[..., :3] * 255).astype(int)  # (rows, columns, 3)
    return np.isin(_code(rgb), np.unique(_code(near)))


def _code(rgb: np.ndarray) -> np.ndarray:
    """One integer per colour, ``(..., 3) -> (...)``."""
    return (rgb[..., 0] * 256 + rgb[..., 1]) * 256 + rgb[..., 2]
