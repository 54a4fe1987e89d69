"""numba_summary.py against real unittest output: a small suite with passes, a docstring,
skips with reasons (one naming an external memory manager), a failure, an error and subtests,
run verbosely; and against the committed baselines when they are at hand."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import numba_summary  # noqa: E402

SUITE = textwrap.dedent('''
    import unittest

    class T(unittest.TestCase):
        def test_ok(self):
            """A docstring's first line shows in verbose output."""

        @unittest.skip("not supported with an EMM Plugin")
        def test_dealloc(self):
            pass

        @unittest.skip("needs two GPUs")
        def test_multi(self):
            pass

        def test_fail(self):
            self.assertEqual(1, 2)

        def test_error(self):
            raise KeyError("x")

        def test_sub(self):
            for i in range(2):
                with self.subTest(i=i):
                    self.assertEqual(i, 0)
''')

BASELINE = "FAIL: test_fail (fodder.T.test_fail)\\n----\\nRan 6 tests in 0.001s\\n\\nFAILED (failures=1, skipped=1)\\n"


class Summary(unittest.TestCase):
    def test_a_verbose_run_compares_with_its_baseline(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "fodder.py"), "w") as f:
                f.write(SUITE)
            log = os.path.join(d, "run.log")
            with open(log, "w") as f:
                subprocess.run([sys.executable, "-m", "unittest", "-v", "fodder"], cwd=d, stdout=f, stderr=subprocess.STDOUT)
            base = os.path.join(d, "base.log")
            with open(base, "w") as f:
                f.write(BASELINE.replace("\\n", "\n"))
            run = numba_summary.parse(log)
            self.assertEqual(run["ran"], 6)
            self.assertEqual(run["counts"], {"failures": 2, "errors": 1, "skipped": 2})
            self.assertEqual(run["skips"], {
                "test_dealloc (fodder.T.test_dealloc)": "not supported with an EMM Plugin",
                "test_multi (fodder.T.test_multi)": "needs two GPUs",
            })
            self.assertEqual(run["outcomes"]["test_ok (fodder.T.test_ok)"], "ok")
            r = numba_summary.compare("fodder", run, numba_summary.parse(base))
            self.assertEqual(r["new_errors"], ["test_error (fodder.T.test_error)"])
            self.assertEqual(r["new_failures"], ["test_sub (fodder.T.test_sub) (i=1)"])
            self.assertEqual(r["new_skips"], 1)
            self.assertEqual([s["emm_related"] for s in r["skips"]], [True, False])
            self.assertEqual(r["verdict"], "FAIL")
            text = numba_summary.markdown([r])
            self.assertIn("| test_dealloc (fodder.T.test_dealloc) | not supported with an EMM Plugin | yes |", text)

    def test_the_baselines_agree_with_themselves(self):
        # The baselines are an input of the bundle (cargo xtask hardware --python-env DIR).
        root = os.environ.get("EMM_PYTHON_ENV_DIR", "")
        suite = os.path.join(root, "numba-cuda-suite-default.log")
        if not root or not os.path.exists(suite):
            self.skipTest("no baselines: set EMM_PYTHON_ENV_DIR to the folder holding numba-cuda-suite-default.log")
        log = numba_summary.parse(suite)
        self.assertEqual((log["ran"], log["counts"]["errors"], log["counts"]["failures"]), (1950, 23, 9))
        self.assertEqual(len(log["errors"]), 23)
        self.assertEqual(len(log["failures"]), 9)
        self.assertTrue(any(e.startswith("test_ipc_array (numba.cuda.tests.cudapy.test_ipc.TestIpcMemory.test_ipc_array) (index=None") for e in log["errors"]))
        r = numba_summary.compare("self", log, log)
        self.assertEqual(r["verdict"], "PASS")


if __name__ == "__main__":
    unittest.main()
