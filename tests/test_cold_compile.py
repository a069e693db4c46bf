"""What a cold start compiles (issue 21: a first prediction in at most ~10 CPU s per estimator).

Numba compiles a function once per distinct tuple of argument types, numba's own overloads
included: every ``np.zeros`` / ``np.empty`` with another dtype, ndim or keyword spelling is an
allocator compiled of its own (``np.zeros`` compiles an ``np.empty`` again plus a fill). The
kernels on the default learners' paths (MulticlassSSVM, MultiLabelSSVM, SequenceTagger) allocate
with four (``_kernels/common.py``)."""
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json
from numba.core import event

seen = []
names = []

class _Allocs(event.Listener):
    def on_start(self, ev):
        disp = ev.data.get("dispatcher")
        name = getattr(getattr(disp, "py_func", None), "__qualname__", "")
        names.append(name)
        if name.startswith(("ol_np_zeros", "ol_np_empty", "ol_np_ones", "ol_np_full")):
            seen.append([name.split(".")[0], str(ev.data.get("args"))])

    def on_end(self, ev):
        pass

event.register("numba:compile", _Allocs())
import streamssvm as ss
m = ss.MulticlassSSVM()
m.learn_one({'a': 1.0, 'b': 0.5}, 'x')
m.learn_one({'a': 0.2, 'c': 1.0}, 'y')
m.predict_one({'a': 1.0})
m = ss.MultiLabelSSVM()
m.learn_one({'a': 1.0, 'b': 0.5}, {'x': True, 'y': False})
m.learn_one({'a': 0.2, 'c': 1.0}, {'x': False, 'y': True})
m.predict_one({'a': 1.0})
m = ss.SequenceTagger()
m.learn_one([{'w=the': 1.0}, {'w=cat': 1.0}], ['D', 'N'])
m.learn_one([{'w=a': 1.0}, {'w=dog': 1.0}, {'w=runs': 1.0}], ['D', 'N', 'V'])
m.predict_one([{'w=the': 1.0}, {'w=dog': 1.0}])
defaults, allocs = sorted(set(names)), list(seen)
m = ss.SequenceTagger(learner=ss.learners.BCFW(evicted_average="keep"))
m.learn_one([{'w=the': 1.0}, {'w=cat': 1.0}], ['D', 'N'])
m.learn_one([{'w=a': 1.0}, {'w=dog': 1.0}, {'w=runs': 1.0}], ['D', 'N', 'V'])
print(json.dumps([allocs, defaults, sorted(set(names))]))
"""


_RUN = []


def _run():
    """(allocators compiled, functions compiled by the defaults, functions compiled after a
    keeping learner too) of one fresh process with an empty kernel cache (run once)."""
    if not _RUN:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, STREAMSSVM_CACHE=os.path.join(tmp, "k"), NUMBA_CACHE_DIR=os.path.join(tmp, "n"))
            out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
        _RUN.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return _RUN[0]


def test_default_paths_compile_four_allocators_and_no_np_zeros():
    seen, _, _ = _run()
    assert seen, "no allocator compiled: the cache was not empty?"
    names = {n for n, _ in seen}
    assert names == {"ol_np_empty"}, seen
    allowed = {"(int64, class(int64))", "(int64, class(int32))", "(int64, omitted(default=<class 'float'>))",
               "(UniTuple(int64, 2), omitted(default=<class 'float'>))"}
    assert {a for _, a in seen} <= allowed, seen


def test_default_learners_compile_no_block_averaging_accumulator_code():
    """The default learners' stores keep no per-block averaging accumulators
    (``evicted_average="restart"``): their kernels compile the empty view of ``layout.avg_view``,
    not its body, and not the sparse chain's accumulator update ``bcfw._snap_avg``; a store that
    keeps them (``evicted_average="keep"``) compiles both."""
    _, defaults, keeping = _run()
    assert "_no_avg_view" in defaults and "_avg_view" not in defaults and "_snap_avg" not in defaults
    assert {"_avg_view", "_snap_avg"} <= set(keeping)
