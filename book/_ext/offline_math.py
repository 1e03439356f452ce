"""Math that renders without a network: every formula becomes MathML at build time.

sphinxcontrib-katex prerenders each formula with its bundled KaTeX under node;
asking KaTeX for MathML alone means the page needs neither MathJax from a CDN
nor KaTeX's web fonts, and no JavaScript at all: browsers draw MathML
natively. ``book/_static/math.css`` picks a math font where one is installed.
"""

from __future__ import annotations

import shutil
import socket
import time
from subprocess import PIPE, Popen

from sphinx.errors import ExtensionError


def _start_server_process(cls, rundir, timeout):
    """sphinxcontrib-katex's start, patient: its node server binds the socket file a
    moment before it listens, and on a busy machine a connect in that moment is
    refused; here it is retried until the (longer) timeout."""
    socket_path = rundir / "katex.sock"
    process = Popen(cls.build_command(socket=socket_path), stdin=PIPE, stdout=PIPE, cwd=rundir)
    deadline = time.monotonic() + timeout
    while True:
        if socket_path.is_socket():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(socket_path))
                return process, sock
            except ConnectionRefusedError:
                sock.close()  # bound, not listening yet
        if time.monotonic() > deadline:
            process.kill()
            raise cls.timeout_error(timeout)
        time.sleep(0.01)


def setup(app):
    if shutil.which("node") is None:
        raise ExtensionError(
            "the book renders its math at build time with node, which is not installed (apt-get install nodejs)"
        )
    from sphinxcontrib import katex

    # The prerenderer reads its options from this module-level dict, not from katex_options.
    katex.KATEX_DEFAULT_OPTIONS.update({"output": "mathml", "throwOnError": False})
    katex.STARTUP_TIMEOUT = katex.RENDER_TIMEOUT = 60.0  # node starts and answers slowly on a loaded machine
    katex.KaTeXServer.start_server_process = classmethod(_start_server_process)
    app.setup_extension("sphinxcontrib.katex")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
