"""A blob download cut mid-body is resumed in the same call with a Range request (OCI transport, against an
in-process server that drops the connection half-way through the first response)."""

from __future__ import annotations

import hashlib
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cachetool.stores.base import BlobRef
from cachetool.stores.oci import OCIStore

DATA = os.urandom(300_000)
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()


class _CutOnce(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        rng = self.headers.get("Range")
        self.requests.append(rng)
        if rng is None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(DATA)))
            self.end_headers()
            self.wfile.write(DATA[: len(DATA) // 3])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # cut: fewer bytes than Content-Length
            return
        start = int(rng.split("=")[1].rstrip("-"))
        body = DATA[start:]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{len(DATA) - 1}/{len(DATA)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_cut_download_resumes_with_range(tmp_path):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _CutOnce)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _CutOnce.requests = []
    try:
        st = OCIStore(f"127.0.0.1:{srv.server_address[1]}", "team/llama", max_attempts=3)
        blob = BlobRef("sha256:" + "0" * 64, 1, DIGEST, len(DATA))
        dest = tmp_path / "blob"
        st.get_blob(blob, dest)
        assert dest.read_bytes() == DATA
        assert _CutOnce.requests[0] is None and _CutOnce.requests[1].startswith("bytes=")
        assert int(_CutOnce.requests[1].split("=")[1].rstrip("-")) > 0
        assert st.counters.blobs_resumed == 1
    finally:
        srv.shutdown()
        srv.server_close()
