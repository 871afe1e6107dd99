"""python -m combiner_attention.bench on the CPU: the operator's rows, and with --peers the SDPA
and FlexAttention rows timed in the same process (each checked against the reference first)."""
import contextlib
import io
import os
import unittest

from combiner_attention import bench

SCRIPTS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "scripts"))


def rows(*argv):
    """{variant: (ms, status)} of bench's rows for argv, at one length."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = bench.main(["--device", "cpu", "--dtype", "float32", "--lengths", "96",
                           "--batch", "1", "--heads", "2", "--dim", "16", "--repeats", "1",
                           *argv])
    lines = out.getvalue().splitlines()
    assert code == 0 and lines[0] == bench.COLUMNS, out.getvalue()
    fields = [dict(zip(bench.COLUMNS.split(","), line.split(","))) for line in lines[1:]]
    return {f["variant"]: (f["ms"], f["status"]) for f in fields}


class BenchTest(unittest.TestCase):
    def test_the_operator_alone(self):
        got = rows("--variants", "full,combiner-axial-vertical")
        self.assertEqual(sorted(got), ["py:combiner-axial-vertical", "py:full"])
        for ms, status in got.values():
            self.assertEqual(status, "ok")
            self.assertGreater(float(ms), 0)

    def test_the_peers_in_the_same_process(self):
        got = rows("--variants", "axial,combiner-axial-vertical,combiner-axial-horizontal",
                   "--peers", SCRIPTS)
        # axial is no Combiner: no FlexAttention row of its own.
        self.assertEqual(sorted(got), ["py:axial", "py:combiner-axial-horizontal",
                                       "py:combiner-axial-vertical",
                                       "py:flex:combiner-axial-horizontal",
                                       "py:flex:combiner-axial-vertical", "py:sdpa-flash"])
        for ms, status in got.values():
            self.assertEqual(status, "ok")
            self.assertGreater(float(ms), 0)

    def test_no_flex_backward_on_the_cpu(self):
        got = rows("--variants", "combiner-fixed", "--peers", SCRIPTS, "--backward")
        self.assertEqual(got["py:combiner-fixed"][1], "ok")
        self.assertEqual(got["py:sdpa-flash"][1], "ok")
        self.assertEqual(got["py:flex:combiner-fixed"],
                         ("", "skipped: flex_attention has no backward on the CPU"))

    def test_a_folder_without_the_peer_is_refused(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as caught:
            bench.main(["--device", "cpu", "--peers", os.path.dirname(SCRIPTS)])
        self.assertEqual(caught.exception.code, 2)
        self.assertIn("--peers: no peer_flex.py in", err.getvalue())


if __name__ == "__main__":
    unittest.main()
