"""emm's Python package over the simulated GPU (EMM_BACKEND=sim, two devices of 1 GiB):
the pure-Python parts, with stand-ins for numba-cuda, CuPy and PyTorch (tests/fakes.py).
Run: EMM_LIBRARY=target/debug/libemm.so python3 -m unittest discover -s capi/python/tests
With EMM_TEST_INSTALLED=1 they test the installed package (``pip install ./capi``) instead of
this checkout's sources, and check that it loads the library it carries.
"""

import ctypes
import gc
import importlib
import os
import re
import sys
import unittest

os.environ.setdefault("EMM_BACKEND", "sim")
os.environ.setdefault("EMM_SIM_DEVICES", "2")
os.environ.setdefault("EMM_SIM_MEMORY", str(1 << 30))
os.environ.pop("EMM_MEMORY_MANAGER", None)
SOURCES = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
INSTALLED = os.environ.get("EMM_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, SOURCES)
sys.path.insert(0, os.path.dirname(__file__))

import emm  # noqa: E402
import fakes  # noqa: E402

GIB = 1 << 30


def live(device=0):
    return emm.stats()["devices"][device]["current_bytes"]


class Core(unittest.TestCase):
    def setUp(self):
        emm.configure("pool")

    def test_stats_configure_and_errors(self):
        s = emm.stats()
        self.assertEqual((s["backend"], s["manager"], s["abi_version"]), ("sim", "pool", 1))
        self.assertEqual(emm.device_count(), 2)
        before = live(1)
        p = emm.alloc(4096, device=1)
        self.assertEqual(live(1), before + 4096)
        emm.free(p)
        self.assertEqual(live(1), before)
        with self.assertRaises(emm.EmmError) as e:
            emm.free(p)
        self.assertIn("already freed", str(e.exception))
        with self.assertRaises(emm.OutOfMemoryError):
            emm.alloc(4 * GIB)
        with self.assertRaises(emm.EmmError) as e:
            emm.configure("no-such")
        self.assertIn("no memory manager named", str(e.exception))
        free, total = emm.memory_info(0)
        self.assertEqual(total, GIB)
        emm.reset()
        emm.reinitialize(pool_allocator=True, initial_pool_size=1 << 20)
        self.assertTrue(emm.stats()["manager"].startswith("reinitialize("))
        with self.assertRaises(ValueError):
            emm.reinitialize(logging=True)

    def test_host_memory_is_real_and_pins_the_callers_memory(self):
        """On the simulator as on a GPU: the program writes the host memory emm gives, and
        emm pins the program's own memory."""
        from emm._lib import check, lib

        l = lib()
        h, d = ctypes.c_void_p(), ctypes.c_void_p()
        check(l.emm_host_alloc(1 << 20, 0, 1, ctypes.byref(h), ctypes.byref(d)))
        self.assertTrue(h.value and d.value)
        ctypes.memset(h, 0x42, 1 << 20)
        self.assertEqual(ctypes.string_at(h.value + (1 << 20) - 4, 4), b"\x42" * 4)
        check(l.emm_free(h, None))
        mine = (ctypes.c_ubyte * 65536)(*([3] * 65536))
        check(l.emm_host_pin(ctypes.addressof(mine), 65536, 0, 0, None))
        mine[7] = 4
        check(l.emm_free(ctypes.addressof(mine), None))
        self.assertEqual((mine[6], mine[7]), (3, 4))
        self.assertEqual(emm.stats()["host_allocations"], 0)

    def test_device_buffer(self):
        data = bytes(range(256)) * 10
        b = emm.DeviceBuffer.to_device(data, device=1)
        self.assertEqual((b.size, b.nbytes, len(b), b.device), (2560, 2560, 2560, 1))
        self.assertEqual(b.tobytes(), data)
        cai = b.__cuda_array_interface__
        self.assertEqual((cai["shape"], cai["typestr"], cai["data"]), ((2560,), "|u1", (b.ptr, False)))
        b.resize(3000)
        self.assertEqual(b.tobytes()[:2560], data)
        b.copy_from_host(b"xyz", offset=2997)
        self.assertEqual(bytes(b.copy_to_host()[-3:]), b"xyz")
        self.assertEqual(emm.stats()["device_buffers"], 1)
        b.close()
        b.close()
        self.assertEqual(emm.stats()["device_buffers"], 0)
        empty = emm.DeviceBuffer(0)
        self.assertEqual((empty.size, empty.ptr, empty.tobytes()), (0, 0, b""))
        with self.assertRaises(emm.OutOfMemoryError):
            emm.DeviceBuffer(2 * GIB)
        n = emm.stats()["device_buffers"]
        x = emm.DeviceBuffer(100)
        del x
        gc.collect()
        self.assertEqual(emm.stats()["device_buffers"], n)


class CAbi(unittest.TestCase):
    """The bindings against ``capi/include/emm.h``, the C ABI they call. ctypes takes a
    prototype on trust: one that disagrees with its declaration passes the wrong bits, and the
    call crashes or corrupts memory without an error."""

    with open(os.path.join(SOURCES, "..", "include", "emm.h")) as f:
        HEADER = f.read()

    # The C types the header uses, by size and signedness (Linux, LP64).
    C_INTEGERS = {
        "int": (4, True),
        "EmmStatus": (4, True),
        "uint32_t": (4, False),
        "uint64_t": (8, False),
        "size_t": (8, False),
        "ssize_t": (8, True),
    }

    def c_kind(self, declaration, named):
        """``"pointer"``, ``(size, signed)`` or ``None`` (void) for a C type, with its
        parameter name when ``named``."""
        words = declaration.replace("*", " * ").split()
        if named:
            words = words[:-1]
        if "*" in words or words == ["cudaStream_t"]:
            return "pointer"
        base = [w for w in words if w not in ("const", "enum", "struct")]
        if base == ["void"]:
            return None
        self.assertEqual(len(base), 1, declaration)
        self.assertIn(base[0], self.C_INTEGERS, f"a C type this test does not know: {declaration}")
        return self.C_INTEGERS[base[0]]

    @staticmethod
    def ctypes_kind(t):
        if t is None:
            return None
        if t in (ctypes.c_void_p, ctypes.c_char_p) or issubclass(t, ctypes._Pointer):
            return "pointer"
        return (ctypes.sizeof(t), t(-1).value < 0)

    def test_every_function_is_bound_as_the_header_declares_it(self):
        declared = re.findall(r"^([A-Za-z][^;(]*?)\b(emm_\w+)\(([^)]*)\);", self.HEADER, re.M)
        self.assertGreaterEqual(len(declared), 30, "the header's declarations did not parse")
        bound = emm._lib._PROTOTYPES
        self.assertEqual(sorted(name for _, name, _ in declared), sorted(bound))
        for returns, name, params in declared:
            params = [] if params.strip() == "void" else params.split(",")
            restype, argtypes = bound[name]
            self.assertEqual(self.ctypes_kind(restype), self.c_kind(returns, False), f"{name} returns")
            self.assertEqual(
                [self.ctypes_kind(t) for t in argtypes],
                [self.c_kind(p, True) for p in params],
                f"{name}'s parameters",
            )

    def test_the_numbers_are_the_headers(self):
        statuses = re.findall(r"^  EMM_STATUS_(\w+) = (\d+),", self.HEADER, re.M)
        numbers = re.findall(r"#define EMM_(\w+) (-?\d+)", self.HEADER) + statuses
        self.assertGreaterEqual(len(numbers), 16, "the header's numbers did not parse")
        for name, value in numbers:
            self.assertEqual(getattr(emm._lib, name), int(value), name)
        library = emm._lib.lib()
        for name, value in statuses:
            self.assertEqual(library.emm_status_name(int(value)).decode(), "EMM_STATUS_" + name)
        self.assertEqual(library.emm_abi_version(), emm._lib.ABI_VERSION)

    def test_the_cupy_hooks_are_laid_out_as_the_header_declares(self):
        fakes.install_cupy()
        sys.modules.pop("emm.cupy", None)
        hooks = importlib.import_module("emm.cupy")._Hooks
        body = re.search(r"typedef struct EmmCupyHooks \{(.*?)\} EmmCupyHooks;", self.HEADER, re.S)
        fields = [f.strip() for f in re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S).split(";")]
        fields = [f for f in fields if f]
        # Every field is a pointer: a function pointer `(*name)(…)` or `void *name`.
        names = [re.search(r"\(\*(\w+)\)|\*(\w+)$", f) for f in fields]
        self.assertTrue(all(names), fields)
        bound = hooks._fields_
        self.assertEqual([n.group(1) or n.group(2) for n in names], [name.rstrip("_") for name, _ in bound])
        self.assertTrue(all(t is ctypes.c_void_p for _, t in bound), bound)


class Package(unittest.TestCase):
    def test_version_and_typing_marker(self):
        parts = emm.__version__.split(".")
        self.assertEqual(len(parts), 3, emm.__version__)
        self.assertTrue(all(p.isdigit() for p in parts), emm.__version__)
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(emm.__file__), "py.typed")))

    @unittest.skipUnless(INSTALLED, "tests the installed package (EMM_TEST_INSTALLED=1)")
    def test_the_installed_package_loads_the_library_it_carries(self):
        package = os.path.dirname(os.path.abspath(emm.__file__))
        self.assertFalse(package.startswith(SOURCES), "imported the checkout, not the install")
        self.assertIsNone(os.environ.get("EMM_LIBRARY"))
        self.assertEqual(os.path.dirname(emm.library_path()), package)
        self.assertTrue(os.path.basename(emm.library_path()).startswith("libemm"))


class Statistics(unittest.TestCase):
    def setUp(self):
        emm.configure("pool")
        self.stats = importlib.import_module("emm.statistics")

    def test_a_block_counts_what_it_allocates(self):
        kept = emm.alloc(1000, device=1)
        with self.stats.statistics() as outer:
            a = emm.alloc(4096)
            b = emm.alloc(8192, device=1)
            emm.free(a)
            with self.stats.statistics(device=0) as inner:
                c = emm.alloc(100)
                self.assertEqual(self.stats.get_statistics().total_bytes, 100)
                emm.free(c)
            emm.free(kept)
            so_far = self.stats.get_statistics()
        emm.free(b)
        self.assertEqual((inner.total_bytes, inner.total_count, inner.current_bytes), (100, 1, 0))
        self.assertEqual((inner.peak_bytes, inner.peak_count), (100, 1))
        # Outer: 4096 + 8192 + 100 allocated; b left live, kept (from before) freed.
        self.assertEqual((outer.total_bytes, outer.total_count), (12388, 3))
        self.assertEqual((outer.current_bytes, outer.current_count), (8192 - 1000, 0))
        self.assertEqual(so_far, outer)
        # The most at once above the start: a and b together on their two devices (the inner
        # block's reset of emm's peaks does not lose them).
        self.assertEqual((outer.peak_bytes, outer.peak_count), (4096 + 8192, 2))
        self.assertIsNone(self.stats.get_statistics())
        with self.assertRaises(RuntimeError):
            self.stats.pop_statistics()

    def test_the_profiler_records_functions_and_blocks(self):
        records = self.stats.ProfilerRecords()

        @self.stats.profiler(records=records)
        def work(n):
            p = emm.alloc(n)
            emm.free(p)
            return n

        self.assertEqual(work(512), 512)
        work(2048)
        with self.stats.profiler(name="block", records=records):
            emm.free(emm.alloc(64))
        r = records.records
        name = [k for k in r if k.endswith("work")][0]
        self.assertEqual((r[name].num_calls, r[name].total_bytes, r[name].peak_bytes), (2, 2560, 2048))
        self.assertEqual((r["block"].num_calls, r["block"].total_count), (1, 1))
        self.assertIn("block", records.report())
        with self.assertRaises(ValueError):
            with self.stats.profiler(records=records):
                pass


class NumbaPlugin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.Context = fakes.install_numba()
        sys.modules.pop("emm.numba", None)
        cls.mod = importlib.import_module("emm.numba")

    def setUp(self):
        emm.configure("pool")

    def test_the_plugin_asks_for_the_ipc_pool_only_over_the_default(self):
        m = self.mod.EMMNumbaManager(context=self.Context(0))
        m.initialize()
        self.assertEqual(emm.stats()["manager"], "pool")
        emm.configure("arena")
        m.initialize()
        self.assertEqual(emm.stats()["manager"], "arena", "the program's choice stands")
        emm.configure(None)
        self.assertEqual(emm.stats()["manager"], "pool-vmm-tight")
        m.initialize()
        self.assertEqual(emm.stats()["manager"], "pool", "Numba needs IPC")

    def test_the_plugin_follows_the_contract(self):
        self.assertIs(self.mod._numba_memory_manager, self.mod.EMMNumbaManager)
        m = self.mod.EMMNumbaManager(context=self.Context(1))
        self.assertEqual(m.interface_version, 1)
        m.initialize()
        m.initialize()
        before = live(1)
        p = m.memalloc(1000)
        self.assertEqual(p.size, 1000)
        self.assertEqual(live(1), before + 1000)
        info = m.get_memory_info()
        self.assertEqual(info.total, GIB)
        # IPC of a view inside the allocation: the offset says where it starts.
        whole = m.get_ipc_handle(p)
        view = self.mod.MemoryPointer(None, ctypes.c_uint64(p.handle.value + 256), 512)
        part = m.get_ipc_handle(view)
        self.assertEqual(part.offset, whole.offset + 256)
        self.assertEqual(bytes(part.handle), bytes(whole.handle))
        self.assertEqual(part.size, 512)
        with m.defer_cleanup():
            self.assertEqual(m.deferred, 1)
        self.assertEqual(m.deferred, 0)
        del p, view, whole, part
        gc.collect()
        self.assertEqual(live(1), before)
        managed = m.memallocmanaged(4096, True)
        # As Numba's own manager: an owned view of the managed memory, which frees it when
        # the last view goes.
        self.assertIsInstance(managed, sys.modules["numba.cuda.cudadrv.driver"].OwnedPointer)
        self.assertEqual(managed.size, 4096)
        with_managed = live(1)
        extra = m.memallocmanaged(4096, True)
        self.assertGreater(live(1), with_managed)
        del extra
        gc.collect()
        self.assertEqual(live(1), with_managed)
        self.assertEqual(m.memalloc(0).size, 0)
        q = m.memalloc(64)
        m.reset()  # frees every allocation of the context, as Numba's own manager does
        self.assertEqual(live(1), before)
        del q, managed
        gc.collect()
        with self.assertRaises(sys.modules["numba.cuda.cudadrv.driver"].CudaAPIError) as e:
            m.memalloc(2 * GIB)
        self.assertEqual(e.exception.code, 2)

    def test_a_pointer_dropped_after_a_reset_does_not_free_a_newer_allocation(self):
        m = self.mod.EMMNumbaManager(context=self.Context(0))
        before = live(0)
        p = m.memalloc(4096)
        addr = p.handle.value
        m.reset()
        self.assertEqual(live(0), before, "reset frees the context's memory")
        # The address may be handed out again while p still exists: p's finalizer must leave
        # the newer allocation's owner alone.
        newer = self.mod._Allocation(0)
        m.allocations[addr] = newer
        del p
        gc.collect()
        self.assertIs(m.allocations.get(addr), newer)

    def test_a_context_attached_to_a_third_party_primary_context_allocates_on_its_device(self):
        # numba-cuda's Test3rdPartyContext: the context holds the binding's CUdevice.
        m = self.mod.EMMNumbaManager(context=self.Context(1, attached=True))
        m.initialize()
        before = live(1)
        p = m.memalloc(4096)
        self.assertEqual(live(1), before + 4096)
        del p
        gc.collect()
        self.assertEqual(live(1), before)

    def test_context_none_is_accepted(self):
        self.assertIsNone(self.mod.EMMNumbaManager(context=None).context)


class CupyAllocator(unittest.TestCase):
    def test_allocations_free_with_their_owner(self):
        state = fakes.install_cupy()
        sys.modules.pop("emm.cupy", None)
        mod = importlib.import_module("emm.cupy")
        emm.configure("pool")
        mod.use_emm()
        self.assertIs(state["allocator"], mod.allocator)
        before = live(0)
        p = mod.allocator(1 << 20)
        self.assertNotEqual(p.ptr, 0)
        self.assertEqual(live(0), before + (1 << 20))
        del p
        gc.collect()
        self.assertEqual(live(0), before)
        z = mod.allocator(0)
        self.assertEqual((z.ptr, z.mem.size), (0, 0))
        with self.assertRaises(sys.modules["cupy.cuda.memory"].OutOfMemoryError):
            mod.allocator(2 * GIB)
        mod.use_cupy_pool()
        self.assertEqual(state["allocator"], "cupy-pool")


class CupyCAllocator(unittest.TestCase):
    """The C-level allocator (``emm_cupy_malloc`` / ``emm_cupy_free``) through a stand-in of
    CuPy's ``CFunctionAllocator`` glue."""

    def use(self, glue, stream_ptr=0):
        state = fakes.install_cupy(stream_ptr=stream_ptr, glue=glue)
        sys.modules.pop("emm.cupy", None)
        mod = importlib.import_module("emm.cupy")
        emm.configure("pool")
        mod.use_emm()
        return state, mod

    def test_allocates_on_the_current_stream_and_frees_with_cupy(self):
        lib = emm._lib.lib()
        stream = ctypes.c_void_p()
        self.assertEqual(lib.emm_stream_create(0, ctypes.byref(stream)), 0)
        state, mod = self.use("propagating", stream_ptr=stream.value)
        self.assertIsNot(state["allocator"], mod.allocator)
        self.assertEqual(state["allocator"].__name__, "malloc")
        before = live(0)
        calls = state["calls"]["current_stream"]
        p = state["allocator"](1 << 20)
        self.assertNotEqual(p.ptr, 0)
        self.assertEqual(state["calls"]["current_stream"], calls + 1)
        self.assertEqual(live(0), before + (1 << 20))
        del p
        gc.collect()
        self.assertEqual(live(0), before)

    def test_out_of_memory_raises_cupys_error_and_loses_nothing(self):
        state, mod = self.use("propagating")
        before = live(0)
        cupy_oom = sys.modules["cupy.cuda.memory"].OutOfMemoryError
        with self.assertRaises(cupy_oom) as caught:
            state["allocator"](2 * GIB)
        self.assertIsInstance(caught.exception, mod.OutOfMemoryError)
        self.assertIn("out of memory: requested 2.0 GiB", str(caught.exception))
        gc.collect()
        self.assertEqual(live(0), before)
        p = state["allocator"](4096)
        self.assertEqual(live(0), before + 4096)
        del p
        gc.collect()

    def test_a_glue_that_loses_the_exception_gets_the_python_allocator(self):
        state, mod = self.use("lossy")
        self.assertIs(state["allocator"], mod.allocator)

    def test_c_level_can_be_declined(self):
        state = fakes.install_cupy(glue="propagating")
        sys.modules.pop("emm.cupy", None)
        mod = importlib.import_module("emm.cupy")
        mod.use_emm(c_level=False)
        self.assertIs(state["allocator"], mod.allocator)

    def test_without_hooks_a_failure_is_null_and_the_last_error(self):
        emm.configure("pool")
        lib = ctypes.PyDLL(emm._lib.library_path())
        lib.emm_cupy_malloc.restype = ctypes.c_void_p
        lib.emm_cupy_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.emm_cupy_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        self.assertIsNone(lib.emm_cupy_malloc(None, 2 * GIB, 0))
        self.assertEqual(emm._lib.last_error()[0], emm._lib.OUT_OF_MEMORY)
        before = live(0)
        p = lib.emm_cupy_malloc(None, 4096, 0)
        self.assertEqual(live(0), before + 4096)
        lib.emm_cupy_free(None, p, 0)
        self.assertEqual(live(0), before)
        # What malloc returns after raising, and a second free, free nothing and raise nothing.
        lib.emm_cupy_free(None, ctypes.c_void_p(2**64 - 1), 0)
        lib.emm_cupy_free(None, p, 0)
        self.assertEqual(emm._lib.last_error()[0], emm._lib.UNKNOWN_POINTER)
        self.assertEqual(live(0), before)


class AllocatorAliases(unittest.TestCase):
    def test_rmm_style_names_are_the_same_modules(self):
        fakes.install_numba()
        fakes.install_cupy()
        fakes.install_torch()
        for fw in ("numba", "cupy", "torch"):
            sys.modules.pop("emm." + fw, None)
            sys.modules.pop("emm.allocators." + fw, None)
            alias = importlib.import_module("emm.allocators." + fw)
            self.assertIs(alias, sys.modules["emm." + fw])
            self.assertIs(getattr(importlib.import_module("emm.allocators"), fw), alias)
        self.assertIs(alias.use_emm, sys.modules["emm.torch"].use_emm)
        numba_alias = importlib.import_module("emm.allocators.numba")
        self.assertIs(numba_alias._numba_memory_manager, numba_alias.EMMNumbaManager)


class TorchAllocator(unittest.TestCase):
    def test_use_emm_and_too_late(self):
        fakes.install_torch(already_initialized=True)
        sys.modules.pop("emm.torch", None)
        mod = importlib.import_module("emm.torch")
        with self.assertRaises(mod.AllocatorError) as e:
            mod.use_emm()
        self.assertIn("too late", str(e.exception))
        self.assertFalse(mod.in_use())
        state = fakes.install_torch()
        sys.modules.pop("emm.torch", None)
        mod = importlib.import_module("emm.torch")
        a = mod.use_emm()
        self.assertIs(state["changed"], a)
        self.assertIs(mod.use_emm(), a)
        # The pair PyTorch loads, with its signature: (ssize_t, int, cudaStream_t).
        a.alloc.restype = ctypes.c_void_p
        a.alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        a.free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        emm.configure("pool")
        before = live(1)
        p = a.alloc(4096, 1, None)
        self.assertTrue(p)
        self.assertEqual(live(1), before + 4096)
        a.free(p, 4096, 1, None)
        self.assertEqual(live(1), before)
        self.assertFalse(a.alloc(2 * GIB, 0, None))
        import torch

        with self.assertRaises(torch.cuda.OutOfMemoryError):
            mod.check()
        mod.check()  # forgotten after the first report

    def test_memory_stats_speak_pytorch_s_names(self):
        fakes.install_torch()
        sys.modules.pop("emm.torch", None)
        mod = importlib.import_module("emm.torch")
        emm.configure(None)  # the default, pool-vmm-tight: it says what it holds
        lib = emm._lib.lib()
        p = ctypes.c_void_p()
        self.assertEqual(lib.emm_alloc(3 << 20, 1, None, ctypes.byref(p)), 0)
        s = mod.memory_stats(1)
        self.assertGreaterEqual(s["allocated_bytes.all.current"], 3 << 20)
        self.assertGreaterEqual(s["allocation.all.current"], 1)
        self.assertGreaterEqual(s["reserved_bytes.all.current"], s["allocated_bytes.all.current"])
        self.assertEqual(lib.emm_free(p, None), 0)
        self.assertGreaterEqual(mod.memory_stats(1)["reserved_bytes.all.current"], 3 << 20)
        emm.configure("default")  # cuMemAlloc per request: nothing held to report
        self.assertEqual(lib.emm_alloc(4096, 1, None, ctypes.byref(p)), 0)
        self.assertNotIn("reserved_bytes.all.current", mod.memory_stats(1))
        self.assertEqual(lib.emm_free(p, None), 0)

    def test_record_snapshot_writes_what_emm_replay_reads(self):
        import gzip
        import pickle
        import tempfile

        state = fakes.install_torch()
        sys.modules.pop("emm.torch", None)
        mod = importlib.import_module("emm.torch")
        path = os.path.join(tempfile.mkdtemp(), "run.pickle.gz")
        with mod.record_snapshot(path):
            self.assertEqual(state["recording"], "all")
            state["trace"].append({"action": "alloc", "addr": 4096, "size": 512, "stream": 0})
        self.assertIsNone(state["recording"])
        with gzip.open(path, "rb") as f:
            snapshot = pickle.load(f)
        self.assertEqual(snapshot["device_traces"][0][0]["action"], "alloc")


if __name__ == "__main__":
    unittest.main()
