"""Tests of the Python client against a real daemon.

The Go test tests/python_test.go starts the daemon and runs these with
SANDBOXD_TEST_URL, SANDBOXD_TEST_TOKEN and SANDBOXD_TEST_SOCKET set.
"""

import io
import os
import tarfile
import unittest

import sandboxd
from sandboxd import Client

URL = os.environ.get("SANDBOXD_TEST_URL")
TOKEN = os.environ.get("SANDBOXD_TEST_TOKEN")
SOCKET = os.environ.get("SANDBOXD_TEST_SOCKET")


@unittest.skipUnless(URL, "SANDBOXD_TEST_URL is not set: run through go test ./tests -run TestPythonClient")
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.c = Client(URL, token=TOKEN)
        self.sb = self.c.create_sandbox(labels={"suite": "python"})
        self.addCleanup(self._delete)

    def _delete(self):
        try:
            self.sb.delete()
        except sandboxd.NotFound:
            pass

    def test_agent_task(self):
        """Create a file, run its failing test, fix it with str_replace,
        run it again, read the result."""
        sb = self.sb
        sb.write_file("calc.py", "def add(a, b):\n    return a - b\n")
        sb.write_file("test_calc.py", "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n")
        obs = sb.run("python3 test_calc.py")
        self.assertEqual(obs["exit_code"], 1)
        self.assertIn("AssertionError", obs["output"])
        edit = sb.edit("str_replace", "calc.py", old_str="return a - b", new_str="return a + b")
        self.assertIn("return a + b", edit["output"])
        obs = sb.run("python3 test_calc.py > result.txt; echo $?")
        self.assertEqual(obs["output"], "0\n")
        self.assertEqual(sb.read_file("result.txt")["content"], "ok\n")

    def test_bash_state_and_stream(self):
        self.sb.run("mkdir -p d && cd d && export X=41")
        self.assertEqual(self.sb.run("echo $((X+1)) $(basename $PWD)")["output"], "42 d\n")
        lines = list(self.sb.run_stream("for i in 1 2 3; do echo $i; done"))
        self.assertEqual(lines[-1]["type"], "observation")
        self.assertEqual(lines[-1]["observation"]["exit_code"], 0)
        streamed = "".join(l.get("data", "") for l in lines if l["type"] == "output")
        self.assertEqual(streamed.replace("\r", ""), "1\n2\n3\n")
        # A soft timeout leaves the command running; input reaches it.
        obs = self.sb.run("read line; echo got $line", timeout=0.5)
        self.assertTrue(obs["running"])
        self.assertIsNone(obs["exit_code"])
        obs = self.sb.run("hello\n", input=True)
        self.assertIn("got hello", obs["output"])

    def test_exec(self):
        obs = self.sb.exec(["sh", "-c", 'echo "$1"; echo err >&2; exit 3', "sh", "a b;c"], stdin="")
        self.assertEqual((obs["stdout"], obs["stderr"], obs["exit_code"]), ("a b;c\n", "err\n", 3))

    def test_errors_are_typed(self):
        with self.assertRaises(sandboxd.NotFound) as cm:
            self.c.sandbox("sb-doesnotexist")
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(sandboxd.InvalidArgument):
            self.sb.act({"kind": "run", "comand": "x"})
        with self.assertRaises(sandboxd.NotFound):
            self.sb.edit("str_replace", "nope.txt", old_str="a", new_str="b")
        self.sb.run("sleep 5", timeout=0.2)
        with self.assertRaises(sandboxd.Conflict):
            self.sb.run("echo busy")
        self.sb.interrupt()
        with self.assertRaises(sandboxd.Unauthenticated):
            Client(URL, token="not-the-token-at-all").info()
        with self.assertRaises(sandboxd.SandboxdError):
            Client("http://127.0.0.1:1").info()

    def test_files(self):
        up = self.sb.upload("data/blob.bin", bytes(range(256)) * 10)
        self.assertEqual(up["bytes"], 2560)
        self.assertEqual(self.sb.download("data/blob.bin"), bytes(range(256)) * 10)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo("t/x.txt")
            info.size = 2
            tf.addfile(info, io.BytesIO(b"hi"))
        buf.seek(0)
        self.assertEqual(self.sb.upload("unpacked", buf, tar=True)["files"], 1)
        self.assertEqual(self.sb.read_file("unpacked/t/x.txt")["content"], "hi")
        out = io.BytesIO()
        self.sb.download("unpacked", into=out)
        with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tf:
            self.assertIn("t/x.txt", [n.lstrip("./") for n in tf.getnames()])

    def test_ipython(self):
        if os.environ.get("SANDBOXD_TEST_NO_IPYTHON"):
            self.skipTest("no ipykernel")
        self.assertEqual(self.sb.ipython("x = 6\nx * 7")["output"], "42")
        err = self.sb.ipython("1/0")["error"]
        self.assertEqual(err["ename"], "ZeroDivisionError")

    def test_browser(self):
        if os.environ.get("SANDBOXD_TEST_NO_BROWSER"):
            self.skipTest("no chromium")
        obs = self.sb.browse("data:text/html,<title>Py</title><button>Press</button>")
        self.assertEqual(obs["title"], "Py")
        self.assertRegex(obs["axtree"], r'\[e\d+\] button "Press"')
        self.assertIn("refused", self.sb.browse("file:///etc/passwd")["error"])

    def test_events(self):
        self.sb.run("echo one")
        self.sb.exec(["true"])
        events = list(self.sb.events())
        kinds = [e["action"]["kind"] for e in events if e["type"] == "action"]
        self.assertEqual(kinds, ["run", "exec"])
        self.assertEqual([e["seq"] for e in events], list(range(1, len(events) + 1)))
        later = list(self.sb.events(after=events[-1]["seq"]))
        self.assertEqual(later, [])
        self.assertEqual(self.c.output(self.sb.id, events[0]["seq"]).replace(b"\r", b""), b"one\n")

    def test_list_and_unix_socket(self):
        ids = [s.id for s in self.c.list_sandboxes()]
        self.assertIn(self.sb.id, ids)
        if SOCKET:
            u = Client("unix://" + SOCKET)
            self.assertEqual(u.health(), {"status": "ok"})
            self.assertEqual(u.sandbox(self.sb.id).id, self.sb.id)
            self.assertEqual(u.sandbox(self.sb.id).run("echo via socket")["output"], "via socket\n")


if __name__ == "__main__":
    unittest.main()
