"""Skip the LLVM work of kernels that are only ever linked into other kernels (cold start).

numba compiles every jitted function into its own LLVM library and, when a kernel calls another
one, links a copy of the callee's optimized module into the caller's library, which is then
optimized and turned into machine code as a whole. The callee's library is also optimized
(module passes) and turned into machine code on its own, although a function compiled without a
Python wrapper and without a C wrapper (``no_cpython_wrapper=True, no_cfunc_wrapper=True``: our
``_INNER`` kernels and the overloads they use, numba's own overload implementations and
subroutines) has no entry point: that work is only ever used through the linked copies. On
``SequenceTagger``'s first record it was 5.9 of 11.6 s of LLVM time (module passes 3.1, machine
code 2.7) at a depth of 5-6 calls.

:func:`install` changes that for code compiled for our kernels (a kernel of this package, or
anything numba compiles while compiling one; other numba code in the process keeps numba's
behaviour): such a library runs its function passes and is linked as before, but its module passes
are left to its callers' module (which runs them on the linked copy anyway), and it is not handed
to the JIT until something asks for its machine code (a pointer to one of its functions, its
object code for the cache, its assembly): then it is optimized and compiled as numba would have
done (``_materialize``). The environment pointer of a deferred function is written when a module
that defines it is added to the JIT. Entry points (with a Python wrapper) are compiled as before;
results are the same (no fast-math: LLVM keeps IEEE semantics whatever it inlines), the machine code
of an entry point can differ in inlining. Guarded by numba's version (0.68, the one tested) and by
the presence of the internals it wraps; ``STREAMSSVM_LINK_ONLY=0`` turns it off (stock numba),
``STREAMSSVM_LINK_ONLY_OPT=0`` keeps the module passes of linked-only libraries (then every entry
point's machine code is numba's own).

:func:`install` also makes numba's compile-flag comparisons cheaper (:func:`_fast_flags`): the
typing of every call to an overload looks its implementation up in a cache keyed by the compile
flags, whose ``__eq__`` and ``__hash__`` build a dict of all ~40 options each time (~0.3 CPU s of
a cold start). The answers are unchanged: the hash only ever depended on the option names (it
hashes the sorted keys of that dict), so it is computed once per flags class; two flags of one
class with the same explicitly set options are equal without building the dicts, any other pair
of one class is compared on its values without a property call per option, any other pair as
numba compares it.
"""
import os

_SUPPORTED = ((0, 68),)
_pending_envs = {}      # env global name -> Environment of a deferred library
_state = {"installed": False}


def _numba_version():
    import numba
    try:
        return tuple(int(p) for p in numba.__version__.split(".")[:2])
    except ValueError:
        return None


def supported():
    """Whether :func:`install` applies to the numba in use."""
    if os.environ.get("STREAMSSVM_LINK_ONLY", "1") == "0" or _numba_version() not in _SUPPORTED:
        return False
    try:
        from numba.core import codegen, compiler, cpu, event
    except ImportError:
        return False
    lib, ctx, cg = codegen.JITCodeLibrary, cpu.CPUContext, codegen.JITCPUCodegen
    return all(hasattr(lib, a) for a in ("finalize", "_finalize_final_module", "_finalize_dynamic_globals",
                                         "_verify_declare_only_symbols", "get_pointer_to_function",
                                         "_get_compiled_object", "get_asm_str", "_optimize_final_module")) \
        and hasattr(ctx, "get_executable") and hasattr(cg, "set_env") and hasattr(compiler, "compile_internal") \
        and hasattr(event, "register") and hasattr(event, "Listener") and _flags_as_expected()


def _flags_as_expected():
    """numba's compile flags keep their set options in ``_values`` and hash only the option names
    (what :func:`_fast_flags` relies on)."""
    from numba.core.targetconfig import TargetConfig
    from numba.core.compiler import Flags
    a, b = Flags(), Flags()
    b.nrt = not a.nrt
    return (getattr(a, "_values", None) == {} and hash(a) == hash(b) and a != b and a == Flags()
            and "_values" in getattr(TargetConfig, "__slots__", ()))


def _defines(module, name):
    try:
        return not module.get_function(name).is_declaration
    except NameError:
        return False


def _materialize(lib):
    """Hand a deferred library to the JIT (what numba's ``finalize`` does last)."""
    if lib.__dict__.pop("_ssvm_deferred", False):
        if lib.__dict__.pop("_ssvm_unoptimized", False):
            _ORIG["optimize"](lib)
        _ORIG["_finalize_final_module"](lib)
        _set_pending_envs(lib._codegen)


def _set_pending_envs(codegen):
    engine = codegen._engine
    for name, env in list(_pending_envs.items()):
        if engine.is_symbol_defined(name):
            _ORIG["set_env"](codegen, name, env)


_ORIG = {}
_OURS = __name__.rsplit(".", 1)[0] + "."      # "streamssvm._kernels."
_compiling = []     # per nested numba compile: whether it runs on behalf of one of our kernels


def _ours():
    """Whether the function being compiled is one of our kernels or compiled for one (numba's own
    overloads and subroutines inside it): code compiled for anything else keeps numba's behaviour."""
    return bool(_compiling) and _compiling[-1]


def _listener():
    from numba.core import event

    class _Compiles(event.Listener):
        def on_start(self, ev):
            disp = ev.data.get("dispatcher")
            mod = getattr(getattr(disp, "py_func", None), "__module__", "") or ""
            _compiling.append(_ours() or mod.startswith(_OURS))

        def on_end(self, ev):
            if _compiling:
                _compiling.pop()

    return _Compiles()
_SKIP_OPT = os.environ.get("STREAMSSVM_LINK_ONLY_OPT", "1") == "1"


def install():
    """Install the deferral (idempotent); returns whether it is active."""
    if _state["installed"]:
        return True
    if not supported():
        return False
    from numba.core import codegen, compiler, cpu, event

    event.register("numba:compile", _listener())
    lib_cls, ctx_cls, cg_cls = codegen.CPUCodeLibrary, cpu.CPUContext, codegen.JITCPUCodegen
    _ORIG.update(_finalize_final_module=lib_cls._finalize_final_module, optimize=lib_cls._optimize_final_module,
                 get_pointer=codegen.JITCodeLibrary.get_pointer_to_function,
                 compiled_object=lib_cls._get_compiled_object, asm=lib_cls.get_asm_str,
                 get_executable=ctx_cls.get_executable, set_env=cg_cls.set_env,
                 compile_internal=compiler.compile_internal)

    def _finalize_final_module(self):
        if not self.__dict__.get("_ssvm_link_only", False):
            _ORIG["_finalize_final_module"](self)
            if _pending_envs:
                _set_pending_envs(self._codegen)
            return
        # numba's steps before handing the module to the JIT, then stop
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._ssvm_deferred = True
        self._finalized = True

    def _optimize_final_module(self):
        if self.__dict__.get("_ssvm_link_only", False) and _SKIP_OPT:
            self._ssvm_unoptimized = True   # the callers' module passes optimize the linked copy
            return
        _ORIG["optimize"](self)

    def get_pointer_to_function(self, name):
        if self.__dict__.get("_ssvm_deferred", False):
            if not _defines(self._final_module, name):
                return 0        # what numba answers for a symbol the library does not define
            _materialize(self)
        return _ORIG["get_pointer"](self, name)

    def _get_compiled_object(self):
        _materialize(self)
        return _ORIG["compiled_object"](self)

    def get_asm_str(self):
        _materialize(self)
        return _ORIG["asm"](self)

    def get_executable(self, library, fndesc, env):
        if not library._finalized and isinstance(library, codegen.JITCodeLibrary):
            mod = library._final_module
            if not (_defines(mod, fndesc.llvm_cpython_wrapper_name) or _defines(mod, fndesc.llvm_cfunc_wrapper_name)):
                library._ssvm_link_only = _ours()
        return _ORIG["get_executable"](self, library, fndesc, env)

    def compile_internal(typingctx, targetctx, library, func, args, return_type, flags, locals):
        # numba's subroutines (``BaseContext.compile_subroutine``): linked into the caller only
        if flags.no_compile and flags.no_cpython_wrapper and flags.no_cfunc_wrapper \
                and isinstance(library, codegen.JITCodeLibrary):
            library._ssvm_link_only = _ours()
        return _ORIG["compile_internal"](typingctx, targetctx, library, func, args, return_type, flags, locals)

    def set_env(self, env_name, env):
        if not self._engine.is_symbol_defined(env_name):
            # the env global of a deferred library: written once a module defining it is in the JIT
            _pending_envs[env_name] = env
            return
        _pending_envs.pop(env_name, None)
        _ORIG["set_env"](self, env_name, env)

    _fast_flags()
    lib_cls._finalize_final_module = _finalize_final_module
    lib_cls._optimize_final_module = _optimize_final_module
    codegen.JITCodeLibrary.get_pointer_to_function = get_pointer_to_function
    lib_cls._get_compiled_object = _get_compiled_object
    lib_cls.get_asm_str = get_asm_str
    ctx_cls.get_executable = get_executable
    cg_cls.set_env = set_env
    compiler.compile_internal = compile_internal
    _state["installed"] = True
    return True


def _fast_flags():
    """Equality and hash of numba's compile flags (``TargetConfig``) without building the dict of
    all options when the answer does not need it (see the module docstring); same answers."""
    from numba.core.targetconfig import TargetConfig
    eq, hsh = TargetConfig.__eq__, TargetConfig.__hash__
    _ORIG.update(flags_eq=eq, flags_hash=hsh)
    hashes, defaults = {}, {}

    def values(self):   # numba's ``values()`` without a property call per option
        d = defaults.get(type(self))
        if d is None:
            d = defaults[type(self)] = {k: o.default for k, o in type(self).options.items()}
        v = dict(d)
        v.update(self._values)
        return v

    def __eq__(self, other):
        if type(self) is type(other):
            return self._values == other._values or values(self) == values(other)
        return eq(self, other)

    def __hash__(self):
        h = hashes.get(type(self))   # numba's hash is that of the sorted option *names*
        if h is None:
            h = hashes[type(self)] = hsh(self)
        return h

    TargetConfig.__eq__ = __eq__
    TargetConfig.__hash__ = __hash__


def uninstall():
    """Restore numba's methods (tests)."""
    if not _state["installed"]:
        return
    from numba.core import codegen, compiler, cpu
    from numba.core.targetconfig import TargetConfig
    TargetConfig.__eq__, TargetConfig.__hash__ = _ORIG["flags_eq"], _ORIG["flags_hash"]
    compiler.compile_internal = _ORIG["compile_internal"]
    codegen.CPUCodeLibrary._finalize_final_module = _ORIG["_finalize_final_module"]
    codegen.CPUCodeLibrary._optimize_final_module = _ORIG["optimize"]
    codegen.JITCodeLibrary.get_pointer_to_function = _ORIG["get_pointer"]
    codegen.CPUCodeLibrary._get_compiled_object = _ORIG["compiled_object"]
    codegen.CPUCodeLibrary.get_asm_str = _ORIG["asm"]
    cpu.CPUContext.get_executable = _ORIG["get_executable"]
    codegen.JITCPUCodegen.set_env = _ORIG["set_env"]
    _state["installed"] = False

