# sandboxd ipykernel launcher: ipykernel_launcher with changes that cut
# the cost of a cell (see "IPython" in docs/benchmarks.md). Each one is
# skipped when this ipykernel lacks what it relies on (the fields below are
# ipykernel 6's), leaving that part of stock ipykernel as it was.
import sys

# The kernel is private to the daemon, which never sends debug requests:
# skip importing debugpy at start-up (0.1-0.3 s of the first cell). Cells
# may still import it: the block is lifted once ipykernel has looked.
if "debugpy" not in sys.modules:
    sys.modules["debugpy"] = None
    try:
        import ipykernel.ipkernel  # noqa: F401
    finally:
        del sys.modules["debugpy"]


def _streams():
    # ipykernel 6 flushes stdout and stderr several times per cell, and each
    # flush waits for a round trip through the IOPub thread even when there
    # is nothing to send: half of `1+1`'s time. A flush with nothing
    # buffered returns at once instead.
    #
    # Output a cell's child processes wrote to fd 1 or 2 must not miss its
    # cell for it: stock ipykernel's fd watcher can hold bytes it has read
    # but not yet buffered while a flush goes by. Here a flush first waits
    # (up to 50 ms) for the watcher to take in what the pipe holds.
    import codecs
    import fcntl
    import os
    import select
    import struct
    import termios
    import time

    from ipykernel.iostream import OutStream

    stock_flush = OutStream.flush

    def pending(fid):
        try:
            return struct.unpack("i", fcntl.ioctl(fid, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            return 0

    def watch(self):
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while self._should_watch:
                # select leaves the bytes in the pipe, where flush sees
                # them, until reading is set.
                if not select.select([self._fid], [], [], 0.5)[0]:
                    continue
                self._sandboxd_reading = True
                try:
                    b = os.read(self._fid, 65536)
                    if not b or not self._should_watch:
                        break
                    self.write(decoder.decode(b))
                    os.write(self._original_stdstream_copy, b)
                finally:
                    self._sandboxd_reading = False
        except Exception:
            self._exc = sys.exc_info()

    def flush(self):
        try:
            fid = getattr(self, "_fid", None)
            if fid is not None and getattr(self, "_should_watch", False):
                deadline = time.monotonic() + 0.05
                while (getattr(self, "_sandboxd_reading", False) or pending(fid)) and time.monotonic() < deadline:
                    time.sleep(0.0002)
            idle = (
                not self._flush_pending
                and not self._subprocess_flush_pending
                and self.echo is None
                and self._buffer.tell() == 0
            )
        except Exception:
            idle = False
        if not idle:
            stock_flush(self)

    # Both or neither, and only on the ipykernel 6 streams they were
    # written for (one buffer written by the caller's thread, an fd watcher
    # that writes into it): the quick flush is only right with this watcher.
    fields = {"_buffer", "_flush_pending", "_subprocess_flush_pending", "_fid", "_original_stdstream_copy", "_should_watch"}
    try:
        used = set(OutStream.__init__.__code__.co_names) | set(OutStream._setup_stream_redirects.__code__.co_names)
    except AttributeError:
        return
    if not fields <= used or not hasattr(OutStream, "_watch_pipe_fd"):
        return
    OutStream._watch_pipe_fd = watch
    OutStream.flush = flush


def _messages():
    from datetime import datetime

    import ipykernel.kernelbase as kb
    from jupyter_client import jsonutil

    # ipykernel inspects do_execute's signature on every execute_request.
    if hasattr(kb, "_accepts_cell_id"):
        stock, memo = kb._accepts_cell_id, {}

        def accepts_cell_id(meth):
            f = getattr(meth, "__func__", meth)
            if f not in memo:
                memo[f] = stock(meth)
            return memo[f]

        kb._accepts_cell_id = accepts_cell_id

    # Every message's date goes through dateutil's general parser; the
    # daemon sends ISO 8601 with an offset, which the standard library
    # parses directly.
    stock_parse = jsonutil.parse_date

    def parse_date(s):
        if isinstance(s, str):
            try:
                d = datetime.fromisoformat(s)
                if d.tzinfo is not None:
                    return d
            except ValueError:
                pass
        return stock_parse(s)

    jsonutil.parse_date = parse_date

    # execute_input is a broadcast for other front ends; the daemon is the
    # kernel's only one.
    if hasattr(kb.Kernel, "_publish_execute_input"):
        kb.Kernel._publish_execute_input = lambda self, *a, **k: None


for _change in (_streams, _messages):
    try:
        _change()
    except Exception:
        pass

# As ipykernel_launcher: the working directory does not shadow modules.
if sys.path and sys.path[0] == "":
    del sys.path[0]

import logging  # noqa: E402

from ipykernel.kernelapp import IPKernelApp  # noqa: E402

app = IPKernelApp.instance()
app.initialize()
# traitlets leaves the logger at DEBUG and filters in its handler, so each
# debug call of each message builds a record for nothing.
app.log.setLevel(max(logging.WARNING, app.log.getEffectiveLevel()))
# The daemon keeps text/plain and these images of a result; the other
# formatters (HTML, Markdown, LaTeX, JSON, ...) would run for nothing.
try:
    app.shell.display_formatter.active_types = ["text/plain", "image/png", "image/jpeg", "image/svg+xml"]
except Exception:
    pass
app.start()
