"""tiny: a lazy tensor library and the compiler that runs it, in one file read top to bottom, in the order data flows.

Sections:
  dtypes          what a value is in memory
  UOp             one hash-consed node type for every level, from tensors to rendered lines
  pattern matcher rules as (pattern, rewrite) tables, and graph_rewrite that applies them
  symbolic        constant folding, identities, index algebra
  views           movement ops as index maps: View, ShapeTracker
  Tensor          the user's API: a thin wrapper around one UOp; composite methods build their graph once per
                  shapes, dtypes and arguments of their inputs, and replay it (composite)
  gradients       a derivative rule per primitive, and the walk that applies them from a loss back
  nn              optimizers (a step is lazy assigns), layers, weights on disk (safetensors)
  scheduler       a tensor graph -> kernels: which nodes are stored, which fuse; pack (a matmul's b stored in tiles)
  lowering        a kernel -> a program: rangeify, transcendentals, row programs, opts (heuristic, tensor cores, BEAM),
                  lanes and threads, accumulators, bfloat16 in float32, linearize; three tune a CPU's memory traffic
                  (reread, tile_order, stream), each with its reason where it is
  renderers       linear UOps -> C, CUDA or Metal source: one algorithm, three dialects as data
  devices         runtimes (the C compiler, the emulator, CUDA and Metal beside this file), buffers
  running         launching kernels, and render() to see them
  TinyJit         a function's kernels captured once and replayed, as one call to the device (graph)
  systems         what a reader of a compiler can skip: the CPU's worker pool in C (which runs a replay's table of
                  kernels too), cache folders and files, composites' templates, sine's exact argument reduction,
                  interpreter workarounds

One realize(), call by call:
  Tensor.realize -> structure (an entry a node: the plan's key) -> planned / plan (over_slots, split_reduce, pack,
  kernel_outputs, kernel_inputs, group_outputs, _kernel: each kernel's AST) -> Plan.run -> prepare -> to_program ->
  lower (ranged, optimize, finish: to_cpu or to_gpu, to_lanes, to_accumulators, after_stores, in_float32, add_loops,
  narrow_index, stream, linearize) -> Renderer.render -> Compiled.program (compile, disk cache) -> launch."""
from __future__ import annotations
import os, sys, math, json, importlib.util, concurrent.futures, struct, ctypes, _ctypes, hashlib, subprocess, time
import tempfile, functools, itertools, re, heapq, weakref, operator, atexit, mmap, numbers, shlex, shutil, threading
import warnings, contextlib, types
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum, auto
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

def getenv(key:str, default:int=0, least:int=0) -> int:
  """A whole-number setting from the environment, read where it is used: a bad value fails there, naming itself."""
  value = os.environ.get(key)
  return setting(key, value, least) if value else default
@functools.lru_cache(maxsize=256)  # each read is parsed once
def setting(key:str, value:str, least:int) -> int:
  if not value.strip().lstrip("-").isdigit() or int(value) < least:
    raise ValueError(f"{key}={value!r}: expected a whole number, at least {least}")
  return int(value)

class Context(contextlib.ContextDecorator):
  """tinygrad's: settings for a block, or a function it decorates, as if set in the environment (Context(DEBUG=2)).
  Each is read where it is used (DEBUG, NOOPT, BEAM), so it holds inside the block; THREADS and DEVICE: read once."""
  def __init__(self, **settings):  # (True and False as 1 and 0, as tinygrad's)
    self.settings = {k: str(int(v) if isinstance(v, bool) else v) for k, v in settings.items()}
  def __enter__(self):
    self.before = {k: os.environ.get(k) for k in self.settings}
    os.environ.update(self.settings)
  def __exit__(self, *_):
    for k, v in self.before.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v

@functools.cache
def threads() -> int: return getenv("THREADS", os.cpu_count() or 1, least=1)  # CPU threads a big kernel splits across
prod = math.prod
def cdiv(a:int, b:int) -> int: return -(-a // b)
def argsort(xs:Sequence) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)  # (a permutation's inverse)

# ---------------------------------------------------------------------------------------------------------------------
# dtypes: what a value is in memory. `fmt` is the struct/buffer-protocol letter (bfloat16, which struct lacks, has "E":
# encoded and decoded read it as the top half of a float32), `priority` orders type promotion.

@dataclass(frozen=True, eq=False)
class DType:
  """Each dtype is one object (vectors are made once, below), so equal is identical: a cheap hash and compare."""
  priority: int
  itemsize: int
  name: str
  fmt: str
  count: int = 1
  @functools.cache
  def vec(self, n:int) -> DType: return replace(self, itemsize=self.itemsize*n, name=f"{self.name}{n}", count=n)
  def __reduce__(self):  # a copy (pickle, deepcopy) is the one object
    return (getattr, (dtypes, self.name)) if self.count == 1 else (DType.vec, (self.scalar, self.count))
  @property
  def scalar(self) -> DType: return self if self.count == 1 else dtypes.by_fmt[self.fmt]
  @property
  def min(self): return dtypes.min(self)
  @property
  def max(self): return dtypes.max(self)
  @property
  def bitsize(self) -> int: return 8 * self.itemsize
  def __repr__(self): return f"dtypes.{self.name}"

class UnknownDType(TypeError, AttributeError):
  """An unknown dtype name: tinygrad's error (it looks the name up on dtypes), and Python's for a value's wrong type."""

class DTypeError(TypeError, RuntimeError):
  """A dtype an op doesn't take: Python's error type, and tinygrad's."""

class dtypes:
  bool = DType(0, 1, "bool", "?")
  int8 = char = DType(1, 1, "char", "b")
  uint8 = uchar = DType(2, 1, "uchar", "B")
  int16 = short = DType(3, 2, "short", "h")
  uint16 = ushort = DType(4, 2, "ushort", "H")
  uint32 = uint = DType(5, 4, "uint", "I")
  int32 = int = DType(6, 4, "int", "i")
  int64 = long = DType(7, 8, "long", "q")
  uint64 = ulong = DType(8, 8, "ulong", "Q")
  float16 = half = DType(9, 2, "half", "e")
  bfloat16 = DType(9, 2, "bfloat16", "E")  # float32's exponent, 7 bits of mantissa: a float32 rounded to its top half
  float32 = float = DType(10, 4, "float", "f")
  float64 = double = DType(11, 8, "double", "d")
  all = (bool, int8, uint8, int16, uint16, uint32, int32, int64, uint64, float16, bfloat16, float32, float64)
  narrow = (float16, bfloat16)  # floats that add up in float32: a sum's, a matmul's
  floats = (float16, bfloat16, float32, float64)  # (tinygrad's groups)
  uints, sints = (uint8, uint16, uint32, uint64), (int8, int16, int32, int64)
  ints = uints + sints
  default_float, default_int = float32, int32  # what a Python float and int become (as tinygrad's: set them to change)
  # index math (ranges, addresses, gates) is exact: lowering makes it int where every value fits 32 bits, else long
  index = DType(7, 8, "index", "q")  # (it shares int64's letter, so index.vec(n).scalar is int64, not index)
  # (and the letters memoryview uses for C's long, unsigned long and char, as numpy and array export them)
  by_fmt = {d.fmt: d for d in all} | {"l": int64, "L": uint64, "c": uint8}
  # a dtype's kind is in its struct letter, which its vectors share (index is "q")
  @staticmethod
  def is_float(d:DType) -> bool: return d.fmt in "eEfd"
  @staticmethod
  def is_int(d:DType) -> bool: return d.fmt in "bBhHIiqQ"
  @staticmethod
  def is_unsigned(d:DType) -> bool: return d.fmt in "BHIQ"
  @staticmethod
  def is_bool(d:DType) -> bool: return d.fmt == "?"
  @staticmethod
  def from_py(v) -> DType:
    """A number's own dtype (tinygrad's name): bool, dtypes.default_int (int64 past its range, uint64 past int64's, as
    numpy), dtypes.default_float; a numpy scalar's alike (by its dtype: tiny doesn't import numpy), float16 kept."""
    np_dtype = str(getattr(v, "dtype", ""))
    if isinstance(v, bool) or np_dtype == "bool": return dtypes.bool
    if isinstance(v, numbers.Integral):
      _checked(dtypes.uint64 if v > 0 else dtypes.int64, v)  # past the widest int of its sign, no dtype holds it
      return next(d for d in (dtypes.default_int, dtypes.int64, dtypes.uint64) if dtypes.fits(d, v))
    if isinstance(v, numbers.Real): return dtypes.float16 if np_dtype == "float16" else dtypes.default_float
    raise TypeError(f"can't make a tensor of {v!r}: a {type(v).__name__} is not a number")
  @staticmethod
  def of(x) -> DType:
    if isinstance(x, DType): return x
    if isinstance(x, str) and isinstance(getattr(dtypes, x, None), DType): return getattr(dtypes, x)
    raise UnknownDType(f"{x!r} is not a dtype; use one of {', '.join(d.name for d in dtypes.all)}")
  @staticmethod
  def finfo(d:DType) -> tuple[int, int]:  # a float's exponent and mantissa bits (tinygrad's)
    if not dtypes.is_float(d): raise ValueError(f"{d.name} is not a float dtype")
    return {dtypes.half: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52)}[d]
  @staticmethod
  def limits(d:DType) -> tuple:
    """The smallest and largest value of d: an int's range, False and True, -inf and inf (as tinygrad's min and max)."""
    if dtypes.is_float(d): return (-math.inf, math.inf)
    if dtypes.is_bool(d): return (False, True)
    return (0, 2**d.bitsize - 1) if dtypes.is_unsigned(d) else (-2**(d.bitsize-1), 2**(d.bitsize-1) - 1)
  @staticmethod
  def min(d:DType): return dtypes.limits(d)[0]
  @staticmethod
  def max(d:DType): return dtypes.limits(d)[1]
  @staticmethod
  def fits(d:DType, x) -> bool: return dtypes.min(d) <= x <= dtypes.max(d)
  @staticmethod
  def promote(*ds:DType) -> DType:
    """The dtype operands meet in: the highest, but a signed int with an unsigned one meets in the narrowest signed int
    wider than the unsigned one and at least as wide as the signed one (int64 at most), as torch's."""
    if ds.count(ds[0]) == len(ds): return ds[0]  # (the common case: they are one)
    top = max(ds, key=lambda d: d.priority)
    if {dtypes.half, dtypes.bfloat16} <= set(ds): return dtypes.float32  # neither holds the other's values
    unsigned = [d.itemsize for d in ds if dtypes.is_unsigned(d)]
    signed = [d.itemsize for d in ds if dtypes.is_int(d) and not dtypes.is_unsigned(d)]
    if dtypes.is_float(top) or not unsigned or not signed: return top
    if max(unsigned) == 8: raise DTypeError(f"no int holds both {' and '.join(d.name for d in ds)}: cast one first")
    width = max(2 * max(unsigned), *signed)  # an unsigned int fits in a signed one twice as wide
    return {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[width]
  @staticmethod
  def python(d:DType) -> type:  # (Python's bool, int and float: a class body's names don't reach its methods)
    return float if dtypes.is_float(d) else bool if dtypes.is_bool(d) else int

def truncate(d:DType, x):
  """A Python number as the machine would hold it in dtype d (ints wrap, floats round to their width)."""
  if d == dtypes.bool: return bool(x)
  if dtypes.is_int(d):  # wrapped into the 2**bits values from the smallest, as two's complement wraps
    bits = 8 * d.itemsize
    lo = 0 if dtypes.is_unsigned(d) else -(1 << (bits - 1))
    return (int(x) - lo) % (1 << bits) + lo
  return decoded(d, encoded(d, [x]))[0]

def encoded(d:DType, vals:Sequence) -> bytes:
  """Values as dtype d holds them in memory; a float too large for d is infinite. A bfloat16 is a float32's top half,
  rounded to the nearest (ties to even), as torch rounds: its bits plus 0x7fff, plus 1 if the kept half is odd."""
  if d != dtypes.bfloat16:
    try: return struct.pack(f"{len(vals)}{d.fmt}", *vals)
    except OverflowError: return b"".join(_finite_or_infinite(d, v) for v in vals)
  wide = struct.unpack(f"{len(vals)}I", encoded(dtypes.float, vals))
  # a nan is the quiet one; any other value rounds to the nearest top half, ties to even
  return struct.pack(f"{len(vals)}H", *[0x7fc0 if (b & 0x7fffffff) > 0x7f800000 else (b + 0x7fff + (b >> 16 & 1)) >> 16
                                          for b in wide])

def _finite_or_infinite(d:DType, v) -> bytes:
  try: return struct.pack(d.fmt, v)
  except OverflowError: return struct.pack(d.fmt, math.copysign(math.inf, v))

def decoded(d:DType, raw:bytes) -> tuple:
  if d != dtypes.bfloat16: return struct.unpack(f"{len(raw) // d.itemsize}{d.fmt}", raw)
  wide = bytearray(2 * len(raw))  # each value's bits as a float32's top half, over a zero bottom half
  wide[2::4], wide[3::4] = raw[0::2], raw[1::2]  # (little-endian: a float32's top half is its bytes 2 and 3)
  return decoded(dtypes.float, bytes(wide))

# ---------------------------------------------------------------------------------------------------------------------
# UOp: one immutable, hash-consed node type for every level of the compiler, from tensors to rendered lines.

class Ops(IntEnum):  # (a plain class after import, for speed: see plain() at the end)
  # tensor level
  BUFFER = auto(); CONST = auto(); IOTA = auto(); VIEW = auto(); REDUCE_AXIS = auto(); CONTIGUOUS = auto()
  # POW(base, exponent, value): value is pow built of ALU ops, what kernels compute (the scheduler puts it in the
  # node's place); the node is there for pow's gradient rule, which needs base and exponent
  POW = auto()
  # kernel level
  PARAM = auto(); LOAD = auto(); STORE = auto(); SINK = auto(); RANGE = auto(); REDUCE = auto(); SPECIAL = auto()
  # (ASSIGN: in a kernel, an accumulator's update; over tensors, a write into a tensor's buffer, as Tensor.assign)
  DEFINE_LOCAL = auto(); DEFINE_ACC = auto(); ASSIGN = auto(); END = auto(); BARRIER = auto(); PREFETCH = auto()
  VECTORIZE = auto(); GEP = auto(); CAST = auto(); BITCAST = auto()
  WMMA = auto()  # a warp's tile product on its tensor cores: D = A @ B + C, each lane holding its fragments
  # ALU
  NEG = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIP = auto()
  ADD = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto(); CMPLT = auto(); CMPNE = auto()
  CMPEQ = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto(); WHERE = auto()

class GroupOp:
  ALU = {Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.ADD, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD,
         Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.WHERE}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR}
  Compare = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}  # an element from the elements at its place
  Pointwise = Elementwise | {Ops.VIEW}  # an element from source elements at places its own index picks

# the named args of kernel-level nodes
class AxisType(Enum):  # (a plain class after import, as Ops)
  """What a kernel's range becomes: a loop or a launch dim, a block's threads, vector lanes. GLOBAL: an output range (a
  launch dim on a GPU, a loop on the CPU); COLUMN: a GPU row program's columns, which each thread of the row's block
  loops over (see row_loops). A kernel's name lists its axes in this order."""
  THREAD = auto(); GLOBAL = auto(); COLUMN = auto(); LOCAL = auto(); GROUP = auto(); REDUCE = auto(); UPCAST = auto()
  UNROLL = auto()
  WARP = auto()  # (only an opt's kind: a matmul's tiles on a warp's tensor cores; its lanes are LOCAL)

class Axis(NamedTuple):  # a RANGE's arg
  id: int  # from one process-wide counter (new_range): ranges of different kernels never merge; a split range's
  # outer part keeps it (apply_opt), and with it the range's place among the loops
  kind: AxisType

class ThreadId(NamedTuple):  # a SPECIAL's arg: which index of the launch it reads
  kind: AxisType  # GLOBAL: the block's; LOCAL: the thread's in its block; THREAD: the CPU core's
  dim: int        # 0, 1, 2 for x, y, z
  @property
  def name(self) -> str: return {AxisType.GLOBAL: "gidx", AxisType.LOCAL: "lidx"}.get(self.kind, "core") + str(self.dim)

class Param(NamedTuple):  # a PARAM's arg: one buffer of a kernel
  slot: int  # its place among the launch's arguments
  size: int  # elements
  @property
  def name(self) -> str: return f"data{self.slot}"

class Reduction(NamedTuple):  # a REDUCE_AXIS's arg
  op: Ops  # ADD, MUL or MAX
  axes: tuple[int, ...]

class Local(NamedTuple):  # a DEFINE_LOCAL's arg: a block's shared memory, or (the CPU) a row on the stack
  id: int
  size: int  # elements

def _trunc_div(a, b): return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
def _fmod(a:float, b:float) -> float: return math.fmod(a, b) if b != 0 and not math.isinf(a) else math.nan  # C's
def _int_mod(a:int, b:int) -> int: return a - b * _trunc_div(a, b) if b != 0 else 0  # C's %: the dividend's sign
def _shift_amount(b): return b if 0 <= b < 64 else 64  # a shift past the width, or by a negative amount: every bit out
def _safe(f):
  def g(*a):
    try: return f(*a)
    except (ValueError, ZeroDivisionError): return math.nan
    except OverflowError: return math.inf
  return g
def _by_zero(a:float, b:float) -> float:  # IEEE's: inf, signed by both signs (b may be -0.0); 0/0 and nan/0 are nan
  return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1, b)
# What every ALU op computes, on every device: C's semantics where C defines them (integer division truncates toward
# zero), and one chosen result where it doesn't: an int's x/0 and x%0 are 0 (a float's fmod by 0 is nan, as C's),
# INT_MIN/-1 wraps, a shift by an amount outside [0, width) gives 0 (or -1 for >> of a negative), max of nan is nan.
# Renderers emit guards that compute the same.
python_alu: dict[Ops, Callable] = {
  Ops.NEG: operator.neg, Ops.EXP2: _safe(lambda x: 2.0**x), Ops.SIN: _safe(math.sin),
  Ops.LOG2: lambda x: math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan),
  Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan,
  Ops.RECIP: lambda x: 1/x if x != 0 else _by_zero(1.0, x),
  Ops.ADD: operator.add, Ops.MUL: operator.mul,
  Ops.FDIV: lambda a, b: a / b if b != 0 else _by_zero(a, b),
  Ops.MAX: lambda a, b: b if a < b or b != b else a,  # (b != b: b is nan, and nan wins)
  Ops.IDIV: lambda a, b: _trunc_div(a, b) if b != 0 else 0,
  Ops.MOD: lambda a, b: _fmod(a, b) if isinstance(a, float) else _int_mod(a, b),
  Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne, Ops.CMPEQ: operator.eq,
  Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor,
  Ops.SHL: lambda a, b: a << _shift_amount(b), Ops.SHR: lambda a, b: a >> _shift_amount(b),
  Ops.WHERE: lambda c, a, b: a if c else b}

def exec_alu(op:Ops, dtype:DType, srcs:Sequence) -> Any: return truncate(dtype, python_alu[op](*srcs))

def _convert(d:DType, x):
  """A C cast: float to int truncates toward zero. Where C leaves it undefined, it saturates at the int type's limits,
  and nan is 0."""
  if dtypes.is_int(d) and isinstance(x, float):
    lo, hi = dtypes.limits(d)
    if math.isnan(x): x = 0
    elif math.isfinite(x): x = math.trunc(x)
    x = min(max(x, lo), hi)
  return truncate(d, dtypes.python(d)(x))

class MathMixin:
  """Operator sugar shared by UOp (builds graphs) and UPat (builds patterns)."""
  def _binop(self, op:Ops, other, reverse:bool): raise NotImplementedError
  def __add__(self, x): return self._binop(Ops.ADD, x, False)
  def __radd__(self, x): return self._binop(Ops.ADD, x, True)
  def __mul__(self, x): return self._binop(Ops.MUL, x, False)
  def __rmul__(self, x): return self._binop(Ops.MUL, x, True)
  def __floordiv__(self, x): return self._binop(Ops.IDIV, x, False)
  def __mod__(self, x): return self._binop(Ops.MOD, x, False)
  def __lt__(self, x): return self._binop(Ops.CMPLT, x, False)
  def __and__(self, x): return self._binop(Ops.AND, x, False)
  def __or__(self, x): return self._binop(Ops.OR, x, False)
  def __lshift__(self, x): return self._binop(Ops.SHL, x, False)
  def __rshift__(self, x): return self._binop(Ops.SHR, x, False)

def arg_key(arg): return (float, repr(arg)) if isinstance(arg, float) else arg  # keeps -0.0, 0.0 and nan apart

def postorder(roots:Iterable[UOp], sources:Callable[[UOp], Sequence[UOp]],
              known:Callable[[UOp], bool]=lambda u: False) -> list[UOp]:
  """The nodes the roots depend on, themselves too, each after its sources; the nodes for which known(u) is true are
  left out, with what only they reach. Iterative: a long elementwise chain would overflow recursion."""
  order, seen, stack = [], set(), [(r, False) for r in reversed(list(roots))]
  while stack:
    u, done = stack.pop()
    if done: order.append(u)
    elif u not in seen and not known(u):
      seen.add(u)
      stack += [(u, True)] + [(s, False) for s in reversed(sources(u))]
  return order

class UOpMeta(type):
  """Hash-consing: a plain dict from (op, dtype, src, arg) to a weak reference to the one node built for it. A node
  lives as long as something holds it; when it dies, its reference's callback drops the entry (and what the key holds,
  such as a BUFFER's memory)."""
  nodes: dict[tuple, NodeRef] = {}
  lock = threading.RLock()  # for replacing or dropping a dead entry: two threads building one node get one object
  def __call__(cls, op:Ops, dtype:DType|None=None, src:tuple=(), arg:Any=None):
    key = (op, dtype, src, arg_key(arg))
    if (ref := UOpMeta.nodes.get(key)) is not None and (u := ref()) is not None: return u
    u = cls.__new__(cls)  # (UOp has no __init__: a node is its four fields)
    u.op, u.dtype, u.src, u.arg = op, dtype, src, arg
    ref = NodeRef(u, UOpMeta.forget)
    ref.key = key
    if UOpMeta.nodes.setdefault(key, ref) is not ref:  # (atomic) taken: another thread's live node, or a dead entry
      with UOpMeta.lock:  # forget() drops dead entries under this lock: look again
        found = UOpMeta.nodes.setdefault(key, ref)
        if found is not ref and (alive := found()) is not None: return alive
        UOpMeta.nodes[key] = ref  # (a dead entry's key: ours now)
    return u
  @staticmethod
  def existing(op:Ops, dtype:DType|None, src:tuple, arg:Any) -> UOp|None:  # the live node of these fields; builds none
    ref = UOpMeta.nodes.get((op, dtype, src, arg_key(arg)))
    return None if ref is None else ref()
  @staticmethod
  def forget(ref:NodeRef, nodes=nodes, lock=lock):
    # drops the entry only if it still holds this dead reference: a node built again for the key in the meantime stays.
    # (It runs at exit too, after this module's names are gone: it reads only what it was given.)
    with lock:
      if nodes.get(ref.key) is ref: del nodes[ref.key]

class NodeRef(weakref.ref):  # a weak reference to a node that knows its key in UOpMeta.nodes
  __slots__ = ("key",)

class UOp(MathMixin, metaclass=UOpMeta):
  """(op, dtype, src, arg). Building the same node twice returns the same object, so identity is equality. Besides its
  fields and cached values (cached_property: see cached at the end), a tensor-level node may hold notes that never
  change what it computes: `realized`, the buffer view it was last computed into (see remember); on a BUFFER,
  `computed_from`, for gradients (see origin); on an ASSIGN, `value_seen` (see _value_seen)."""
  op: Ops
  dtype: DType|None
  src: tuple[UOp, ...]
  arg: Any
  def __repr__(self):
    return f"UOp({self.op}, {self.dtype}, arg={self.arg!r}, src=({', '.join(str(s.op) for s in self.src)}))"
  def replace(self, **kw) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg))
  @staticmethod
  def const(dtype:DType, value) -> UOp:  # rounded to its dtype here, so every device sees the same value
    if dtype.count > 1: return UOp(Ops.VECTORIZE, dtype, (UOp.const(dtype.scalar, value),) * dtype.count)  # each lane
    return UOp(Ops.CONST, dtype, (), truncate(dtype, dtypes.python(dtype)(value)))
  def const_like(self, value) -> UOp: return UOp.const(self.dtype, value)
  def alu(self, op:Ops, *srcs:UOp) -> UOp:
    if op in GroupOp.Compare: dtype = dtypes.bool
    else: dtype = srcs[0].dtype if op is Ops.WHERE else self.dtype  # (a where's first source is its condition)
    return UOp(op, dtype, (self,) + srcs)
  def _binop(self, op, x, reverse):
    x = x if isinstance(x, UOp) else self.const_like(x)
    return x.alu(op, self) if reverse else self.alu(op, x)
  def __neg__(self) -> UOp: return self.alu(Ops.NEG)
  def __sub__(self, x) -> UOp: return self + -(x if isinstance(x, UOp) else self.const_like(x))
  def where(self, a:UOp, b:UOp) -> UOp: return self.alu(Ops.WHERE, a, b)
  def cast(self, dtype:DType) -> UOp: return self if dtype == self.dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype:DType) -> UOp: return UOp(Ops.BITCAST, dtype, (self,))  # the same bits, read as dtype
  def moved(self, *moves:tuple[str, Any]) -> UOp:  # through movement ops (View methods' names, their args): one VIEW
    base, st = (self.src[0], self.arg) if self.op is Ops.VIEW else (self, ShapeTracker.contiguous(self.shape))
    for fn, arg in moves: st = st.apply(fn, arg)
    return UOp(Ops.VIEW, self.dtype, (base,), st)
  def detached(self) -> UOp:
    """The same values, as a view the gradient walk stops at: its tracker begins with the move "detach" (no View
    method: composites do not replay it). A buffer's view stays one (the move's arg: the tracker detached, see path);
    any other node is viewed whole, so that if it is realized first, this reads it, not its sources."""
    if self.op is Ops.VIEW and self.src[0].op in (Ops.BUFFER, Ops.ASSIGN):
      return UOp(Ops.VIEW, self.dtype, self.src, ShapeTracker(self.arg.views, Move("detach", self.arg)))
    return UOp(Ops.VIEW, self.dtype, (self,), ShapeTracker((View.contiguous(self.shape),), Move("detach", None)))
  def rebind(self, buf) -> UOp:  # this VIEW of a buffer, over another one (a Buffer, or a plan's Slot)
    return UOp(Ops.VIEW, self.dtype, (UOp(Ops.BUFFER, self.dtype, (), buf),), self.arg)

  @property
  def toposort(self) -> list[UOp]: return self._sources + [self]
  @functools.cached_property
  def _sources(self) -> list[UOp]:  # itself left out: a node in its own list would be a cycle, freed (with its
    # buffer) only by a gc pass, not when its last holder lets go
    return postorder(self.src, lambda u: u.src)
  @functools.cached_property
  def shape(self) -> tuple[int, ...]:
    """The shape of a tensor-level node; ALU sources already share one."""
    if self.op in (Ops.BUFFER, Ops.PARAM): return (self.arg.size,)
    if self.op is Ops.IOTA: return (self.arg,)
    if self.op is Ops.CONST: return ()
    if self.op is Ops.VIEW: return self.arg.shape
    if self.op is Ops.REDUCE_AXIS: return tuple(1 if i in self.arg.axes else s for i, s in enumerate(self.src[0].shape))
    return self.src[-1].shape  # (any other op: its sources share one shape; POW's value is its last)
  def _bottom_up(self, name:str, compute:Callable[[UOp], Any]) -> Any:
    """A cached field computed for the sources first, only those not known yet: a long chain doesn't recurse, and a
    graph built on one asked before walks its new part."""
    for u in postorder([self], lambda u: u.src, known=lambda u: name in u.__dict__): u.__dict__[name] = compute(u)
    return self.__dict__[name]
  @functools.cached_property
  def key(self) -> tuple: return self._bottom_up("key", UOp._key)  # a structural key that orders the terms of a sum
  def _key(self) -> tuple:  # ranges by when they were made (as text, id 10 would come before id 9)
    arg = self.arg.id if self.op is Ops.RANGE else repr(self.arg)
    # (False < True: a constant sorts last, so a sum is x+3, never 3+x)
    return (self.op is Ops.CONST, self.op.value, repr(self.dtype), arg, tuple(s.key for s in self.src))
  @property
  def in_memory(self) -> bool: return self.op is Ops.VIEW and self.src[0].op is Ops.BUFFER  # a view of a buffer
  @functools.cached_property
  def buffers(self) -> frozenset[UOp]: return self._bottom_up("buffers", UOp._buffers)  # (how assign finds readers)
  def _buffers(self) -> frozenset[UOp]:  # the BUFFER nodes it reads
    if self.op is Ops.BUFFER: return frozenset((self,))
    return self.src[0].buffers if len(self.src) == 1 else frozenset().union(*[s.buffers for s in self.src])
  def terms(self, op:Ops=Ops.ADD) -> list[UOp]:  # a sum's terms (or an AND's conditions)
    return [t for s in self.src for t in s.terms(op)] if self.op is op else [self]

  # named parts of kernel nodes: RANGE and SPECIAL(size), LOAD(buf, addr[, gate]), STORE(buf, addr, value[, gate]);
  # by place: REDUCE(value, *ranges) (arg: its op), END(range, *body), DEFINE_ACC(identity, *loops it lives in).
  # A LOAD's buf may be a BARRIER of its buffer (it waits for stores: see after_stores); an accumulator's LOAD has no
  # addr: its second source is the loop iteration or END it reads the accumulator after
  @property
  def size(self) -> int: return self.src[0].arg  # RANGE, SPECIAL: how many values it takes
  @property
  def kind(self) -> AxisType: return self.arg.kind  # RANGE, SPECIAL
  @property
  def buf(self) -> UOp: return self.src[0]
  @property
  def memory(self) -> UOp:  # LOAD, STORE: the buffer it accesses (after a BARRIER: the buffer whose stores it orders)
    return self.buf.buf if self.buf.op is Ops.BARRIER else self.buf
  @property
  def addr(self) -> UOp: return self.src[1]
  @property
  def value(self) -> UOp: return self.src[2]  # a STORE's
  @property
  def gate(self) -> UOp|None:  # the condition a LOAD or STORE happens under; None: always
    return self.src[self._gate_at] if len(self.src) > self._gate_at else None
  def gated(self, valid:UOp|None) -> UOp:  # this LOAD or STORE, happening only where valid holds too
    gate = all_of(self.gate, valid)
    return self.replace(src=self.src[:self._gate_at] + (() if gate is None else (gate,)))
  @property
  def _gate_at(self) -> int: return 2 if self.op is Ops.LOAD else 3
  def const_factor(self) -> int:
    """The largest integer this int expression is provably a multiple of."""
    if self.op is Ops.CONST: return abs(self.arg)
    if self.op is Ops.MUL and self.src[1].op is Ops.CONST: return abs(self.src[1].arg) * self.src[0].const_factor()
    if self.op is Ops.ADD: return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
    return 1

  # value bounds of int expressions: what index simplification and gate removal reason with
  @functools.cached_property
  def bounds(self) -> tuple:
    if self.op is Ops.CONST: return (self.arg, self.arg)
    if self.op in (Ops.RANGE, Ops.SPECIAL): return (0, self.size - 1)
    if self.dtype == dtypes.bool and self.op not in GroupOp.ALU: return (False, True)
    limits, b = dtypes.limits(self.dtype), None
    operands = self.src[1:] if self.op is Ops.WHERE else self.src  # (a where's condition is no operand)
    if self.op in alu_bounds and \
       all(s.dtype.count == 1 and (dtypes.is_int(s.dtype) or s.dtype == dtypes.bool) for s in operands):
      b = alu_bounds[self.op](*[s.bounds for s in self.src])
    if b is not None and limits[0] <= b[0] and b[1] <= limits[1]: return b  # past the limits it wraps: anything
    return limits
  @property
  def vmin(self): return self.bounds[0]
  @property
  def vmax(self): return self.bounds[1]

def _product_bounds(a, b):
  products = [x * y for x in a for y in b]
  return (min(products), max(products))
def _and_bounds(a, b):  # x & y is in [0, y] for y >= 0: it only clears y's bits
  highs = [x[1] for x in (a, b) if x[0] >= 0]
  return (0, min(highs)) if highs else None
def _positive_const(b) -> bool: return b[0] == b[1] and b[0] > 0
def _mod_bounds(a, b):  # C's remainder takes the sign of the dividend
  # a's range within one multiple of b and the next: the remainder runs from lo % b to hi % b
  if a[0] >= 0 and a[0] // b[0] == a[1] // b[0]: return (a[0] % b[0], a[1] % b[0])
  lo = 0 if a[0] >= 0 else max(a[0], 1 - b[0])  # from 0, or down to -(b-1) for a negative dividend
  hi = 0 if a[1] <= 0 else min(a[1], b[0] - 1)  # to 0, or up to b-1 for a positive one
  return (lo, hi)

# the range of each op's result from its sources' ranges (lo, hi); None where it can't be said
alu_bounds: dict[Ops, Callable] = {
  Ops.CAST: lambda a: a,  # (of an int or a bool: the same values)
  Ops.ADD: lambda a, b: (a[0] + b[0], a[1] + b[1]), Ops.NEG: lambda a: (-a[1], -a[0]), Ops.MUL: _product_bounds,
  Ops.MAX: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
  Ops.IDIV: lambda a, b: (_trunc_div(a[0], b[0]), _trunc_div(a[1], b[0])) if _positive_const(b) else None,
  Ops.MOD: lambda a, b: _mod_bounds(a, b) if _positive_const(b) else None,
  # a compare's bounds are (always true, can be true), as False < True
  Ops.CMPLT: lambda a, b: (a[1] < b[0], a[0] < b[1]),
  Ops.CMPNE: lambda a, b: (a[1] < b[0] or b[1] < a[0], not (a[0] == a[1] == b[0] == b[1])),
  Ops.CMPEQ: lambda a, b: (a[0] == a[1] == b[0] == b[1], not (a[1] < b[0] or b[1] < a[0])),
  Ops.AND: lambda a, b: (a[0] and b[0], a[1] and b[1]) if isinstance(a[0], bool) else _and_bounds(a, b),
  Ops.SHR: lambda a, b: (a[0] >> b[1], a[1] >> b[0]) if a[0] >= 0 and b[0] >= 0 else None,
  # a where: both branches' bounds while its condition can go either way
  Ops.WHERE: lambda c, a, b: (min(a[0], b[0]), max(a[1], b[1])) if c[0] != c[1] else (a if c[0] else b)}

# ---------------------------------------------------------------------------------------------------------------------
# Pattern matcher: the algebra (symbolic rules) and the rendering (string rules) are tables of rules; structural passes
# (scheduling, ranges, lanes, accumulators) are named functions. A rule is (UPat, fn(**captures) -> UOp | None).

def _some(v) -> tuple|None:  # None (any), or the values a pattern's field takes
  if v is None: return None
  return tuple(v) if isinstance(v, (set, tuple)) else (v,)

class UPat(MathMixin):
  """src as a tuple matches in order; as a list, in any order (commutative ops); a name twice binds the same node."""
  def __init__(self, op=None, dtype=None, src=None, arg=None, name:str|None=None):
    self.op, self.dtype = _some(op), _some(dtype)
    self.src, self.arg, self.name = src, arg, name
    self.orders = list(itertools.permutations(src)) if isinstance(src, list) else [src]  # of src, to try in turn
    self.needs = {p.op[0] for p in src or () if p.op is not None and len(p.op) == 1}  # ops some source is pinned to
  def __repr__(self): return f"UPat({self.op}, {self.dtype}, src={self.src!r}, arg={self.arg!r}, name={self.name!r})"
  @staticmethod
  def var(name:str|None=None, dtype=None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name:str|None=None, dtype=None) -> UPat: return UPat(Ops.CONST, dtype, name=name)
  def _binop(self, op, x, reverse):
    x = x if isinstance(x, UPat) else UPat(Ops.CONST, arg=x)
    srcs = (x, self) if reverse else (self, x)  # an ALU result has its first source's dtype (a compare: bool)
    return UPat(op, None if op in GroupOp.Compare else srcs[0].dtype, list(srcs) if op in GroupOp.Commutative else srcs)

  def match(self, u:UOp, store:dict) -> list[dict]:
    if self.op is not None and u.op not in self.op: return []
    if self.dtype is not None and u.dtype not in self.dtype: return []
    if self.arg is not None and u.arg != self.arg: return []
    if self.arg is not None and type(u.arg) is bool and type(self.arg) is not bool: return []  # (True == 1 in Python)
    if self.name is not None and store.setdefault(self.name, u) is not u: return []
    if self.src is None: return [store]
    matches = []
    for pats in self.orders:
      if len(pats) != len(u.src): continue
      stores = [store]
      for p, s in zip(pats, u.src):
        op_fits = p.op is None or s.op in p.op  # (checked before the captures are copied)
        stores = [m for st in stores for m in p.match(s, dict(st))] if op_fits else []
      matches.extend(stores)
    return matches

class PatternMatcher:
  def __init__(self, rules:list[tuple[UPat, Callable]]):
    self.pdict: dict[Ops, list] = defaultdict(list)
    for pat, fn in rules:
      takes_ctx = "ctx" in fn.__code__.co_varnames[:fn.__code__.co_argcount]  # a parameter named ctx
      for op in pat.op: self.pdict[op].append((pat, fn, takes_ctx))
    self.fixed: weakref.WeakSet = weakref.WeakSet()  # nodes graph_rewrite left as they are, and so all their sources
  def fire(self, u:UOp, ctx=None) -> Fired|None:
    """The first rule that rewrites u, and what it made of it."""
    ops = {s.op for s in u.src}  # most nodes match no rule: one needing a source op u lacks is not even tried
    for pat, fn, takes_ctx in self.pdict.get(u.op, ()):
      for captures in (pat.match(u, {}) if pat.needs <= ops else ()):
        out = fn(ctx=ctx, **captures) if takes_ctx else fn(**captures)
        if out is not None and out is not u: return Fired(pat, out)
    return None
  def rewrite(self, u:UOp, ctx=None) -> Any:
    return None if (fired := self.fire(u, ctx)) is None else fired.new

class Fired(NamedTuple):  # a rule that rewrote a node: its pattern, and what it made
  pattern: UPat
  new: Any

# rules that undo each other would loop forever: far more rewrites than nodes (this many, plus 64 a node) is such a loop
REWRITE_LIMIT = 10000

def graph_rewrite(sink:UOp, pm:PatternMatcher) -> UOp:
  """Rewrite sources first, then the node; a node a rule returns is itself rewritten, so all reach a fixed point. A node
  at a fixed point stays one: a later rewrite by the same rules skips it, sources and all, so each is rewritten once."""
  done: dict[UOp, UOp] = {}
  stack: list[tuple[UOp, str, UOp|None]] = [(sink, "visit", None)]  # (node, step, what a rule made of it)
  rewrites = 0
  while stack:
    u, step, new = stack.pop()
    if u in done: continue
    if step == "visit" and u in pm.fixed: done[u] = u
    elif step == "visit":  # its sources first
      stack.append((u, "rewrite", None))
      stack.extend((s, "visit", None) for s in reversed(u.src) if s not in done)
    elif step == "rewrite":
      src = tuple(done[s] for s in u.src)
      node = u if src == u.src else u.replace(src=src)
      if (fired := pm.fire(node)) is None:
        done[u] = node
        pm.fixed.add(node)
      else:
        stack += [(u, "become", fired.new), (fired.new, "visit", None)]
        rewrites += 1
        if rewrites > REWRITE_LIMIT + 64 * len(done):
          raise RuntimeError(f"rewrite rules don't reach a fixed point: {fired.pattern} keeps rewriting {node.op.name}")
    else: done[u] = done[new]  # "become": u becomes what its rewrite becomes, once that is rewritten
  return done[sink]

def rebuild(sink:UOp, fn:Callable[[UOp, UOp], UOp]) -> UOp:
  """Each node, sources first, rebuilt over its new sources, and fn(node, rebuilt node) says what it becomes. Unlike
  a rewrite, what fn returns is not rewritten again (r -> r+1 stays)."""
  done: dict[UOp, UOp] = {}
  for u in sink.toposort:
    src = tuple(done[s] for s in u.src)
    done[u] = fn(u, u if src == u.src else u.replace(src=src))
  return done[sink]

def substitute(sink:UOp, mapping:dict[UOp, UOp]) -> UOp:  # replace nodes once, bottom-up
  return rebuild(sink, lambda u, new: mapping.get(u, new)) if mapping else sink

def all_of(*conds:UOp|None) -> UOp|None:  # the conjunction of the conditions that are there; None: no condition
  present = [c for c in conds if c is not None]
  return functools.reduce(operator.and_, present) if present else None

# ---------------------------------------------------------------------------------------------------------------------
# Symbolic rules: constant folding, identities, and the index algebra that makes a float4 address `gidx0*4` with no
# division left. C's `/` and `%` truncate where Python's floor, so div/mod rules only fire where bounds prove x >= 0.

ints = (dtypes.int32, dtypes.int64, dtypes.index)  # the ints the rules below rewrite: narrower ones stay as written
x, y, c0, c1 = UPat.var("x"), UPat.var("y"), UPat.cvar("c0"), UPat.cvar("c1")
xi, yi = UPat.var("x", ints), UPat.var("y", ints)
xidx = UPat.var("x", dtypes.index)  # only index math is sure not to wrap: user ints wrap as the machine's do

def fold_divmod(x:UOp, c:UOp, op:Ops) -> UOp|None:
  """(a*c + b) // c -> a + b//c and (a*c + b) % c -> b % c, where b >= 0: split off the terms c divides. A term a*f
  whose factor f is larger than c and no multiple of it is split first, as a*(f - f%c) + a*(f%c), so that c divides
  the first part ((7j + k) % 5, 0 <= k < 5: 7j is 5j + 2j, and 5j goes)."""
  if c.arg <= 0 or x.vmin < 0: return None
  if op is Ops.MOD and x.vmax < c.arg: return x
  terms = []
  for t in x.terms():
    f = t.const_factor()
    if f > c.arg and f % c.arg:
      a = exact_div(t, f)  # t = a*f = a*(f - f%c) + a*(f%c): c divides the first
      terms += [a * (f - f % c.arg), a * (f % c.arg)]
    else: terms.append(t)
  whole = [t for t in terms if t.const_factor() % c.arg == 0]
  if not whole: return common_factor(x, c.arg, op)
  rest = [t for t in terms if t.const_factor() % c.arg != 0]
  rem = functools.reduce(operator.add, rest) if rest else x.const_like(0)
  if rem.vmin < 0: return None
  if op is Ops.MOD: return rem % c.arg
  return functools.reduce(operator.add, [exact_div(t, c.arg) for t in whole]) + rem // c.arg

def common_factor(x:UOp, c:int, op:Ops) -> UOp|None:
  """(g*a + b) // c -> a // (c/g) and (g*a + b) % c -> (a % (c/g))*g + b, where g divides c and 0 <= b < g: b can't
  carry g*a past a multiple of c. (8r + 3) // 16 is r // 2: a vector's 8 lanes at 8r + k read one element of a row of
  16, once; (32768k + p) // 294912 with p < 32768 is k // 9: a flat index's dim, without the dims below it."""
  terms = x.terms()
  for g in sorted({math.gcd(c, t.const_factor()) for t in terms} - {1}, reverse=True):
    rest = [t for t in terms if t.const_factor() % g]
    b = functools.reduce(operator.add, rest) if rest else x.const_like(0)
    if b.vmin < 0 or b.vmax >= g: continue
    a = functools.reduce(operator.add, [exact_div(t, g) for t in terms if t.const_factor() % g == 0])
    n = c // g  # what is left of c once g is divided out
    return a // n if op is Ops.IDIV else (a % n) * g + b
  return None

def exact_div(t:UOp, c:int) -> UOp:  # t // c, for t a constant or x*k (k a constant), where c divides t exactly
  if t.op is Ops.CONST: return t.const_like(t.arg // c)
  x, k = t.src[0], t.src[1].arg
  if k % c == 0: return x * (k // c)
  g = math.gcd(c, k)  # x*k is a multiple of c: k supplies g of it, x the rest, c // g
  return exact_div(x, c // g) * (k // g)

def is_const(u:UOp) -> bool: return u.op is Ops.CONST
def sort_terms(a:UOp) -> UOp|None:
  terms = a.terms()
  ordered = sorted(terms, key=lambda t: t.key)
  return None if ordered == terms else functools.reduce(operator.add, ordered)

def _whole_vector(u:UOp) -> UOp|None:  # u is v if its lanes are v's, each in its place
  v = u.src[0].src[0] if u.src[0].op is Ops.GEP else None
  if v is None or v.dtype != u.dtype: return None
  return v if all(s.op is Ops.GEP and s.src[0] is v and s.arg == k for k, s in enumerate(u.src)) else None

symbolic = PatternMatcher([
  # constant folding, and an int expression whose bounds pin one value is that value
  (UPat(GroupOp.ALU, name="a"), lambda a: a.const_like(exec_alu(a.op, a.dtype, [s.arg for s in a.src]))
    if all(map(is_const, a.src)) and a.dtype.count == 1 else None),
  (UPat(GroupOp.ALU, dtype=ints + (dtypes.bool,), name="a"),
    # (scalars only: ask an operand, since a compare of vectors is typed plain bool)
    lambda a: a.const_like(a.vmin) if a.vmin == a.vmax and a.src[-1].dtype.count == 1 else None),
  (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="u"), lambda u, c: u.const_like(_convert(u.dtype, c.arg))
    if u.dtype.count == 1 else None),
  # bools: + and * would compute in int (True + True is 2; -2 in a CPU vector, whose true is the mask -1): they are |
  # and &, which every device computes alike; -b is b (a bool holds n != 0)
  (UPat(Ops.ADD, dtypes.bool, src=(x, y)), lambda x, y: x | y),         # a+b -> a|b
  (UPat(Ops.MUL, dtypes.bool, src=(x, y)), lambda x, y: x & y),         # a*b -> a&b
  (UPat(Ops.NEG, dtypes.bool, src=(x,)), lambda x: x),                  # -a -> a
  # identities, each exact for every value of its dtype: x+0.0 is 0.0 where x is -0.0, and x*0 is nan where x is
  # nan or inf, so those two fold only for ints
  (UPat(Ops.ADD, src=[xi, yi]), lambda x, y: x if y.vmin == y.vmax == 0 else None),  # x+y -> x, y pinned to 0 (ints)
  (x + c0, lambda x, c0: x if c0.arg == 0 and math.copysign(1, c0.arg) < 0 else None),  # x+(-0.0) -> x
  (x * 1, lambda x: x),                                                 # x*1 -> x
  (xi * 0, lambda x: x.const_like(0)),                                  # x*0 -> 0 (ints: floats have nan*0)
  (x // 1, lambda x: x),                                                # x//1 -> x
  (UPat(Ops.AND, src=[x, UPat.cvar("c", dtypes.bool)]), lambda x, c: x if c.arg else c),  # x&True -> x, x&False: False
  (UPat(Ops.WHERE, src=(UPat.var(), x, x)), lambda x: x),               # c ? x : x -> x
  (UPat(Ops.WHERE, src=(UPat.cvar("c"), x, y)), lambda c, x, y: x if c.arg else y),  # True ? x : y -> x
  (UPat(Ops.WHERE, dtypes.bool, src=(UPat.var("c"), UPat(Ops.CONST, arg=True), UPat(Ops.CONST, arg=False))),
    lambda c: c),                                                       # c ? True : False -> c
  # canonical order: constants last, so the rules below see one shape (but a max with a constant 0 stays as it is:
  # max of -0.0 and 0.0 is its first, and swapping would change a zero's sign)
  (UPat(GroupOp.Commutative, src=(c0, x), name="a"),                   # c+x -> x+c
    lambda a, c0, x: None if is_const(x) or (a.op is Ops.MAX and c0.arg == 0) else a.replace(src=(x, c0))),
  ((xi + c0) + c1, lambda x, c0, c1: x + (c0.arg + c1.arg)),            # (x+c0)+c1 -> x+(c0+c1)
  ((xi * c0) * c1, lambda x, c0, c1: x * (c0.arg * c1.arg)),            # (x*c0)*c1 -> x*(c0*c1)
  (UPat(Ops.ADD, src=[xi + c0, yi]), lambda x, c0, y: None if is_const(y) else (x + y) + c0),  # (x+c)+y -> (x+y)+c
  ((xi + yi) * c0, lambda x, y, c0: x * c0 + y * c0),                   # (x+y)*c -> x*c+y*c
  (UPat(Ops.ADD, ints, name="a"), sort_terms),                           # a+b+c in one canonical order
  # like terms
  (xi * c0 + xi * c1, lambda x, c0, c1: x * (c0.arg + c1.arg)),         # x*c0+x*c1 -> x*(c0+c1)
  (xi + xi * c0, lambda x, c0: x * (c0.arg + 1)),                       # x+x*c -> x*(c+1)
  (xi + xi, lambda x: x * 2),                                           # x+x -> x*2
  # division and remainder by a constant
  (xi // c0, lambda x, c0: fold_divmod(x, c0, Ops.IDIV)),              # (a*c+b)//c -> a+b//c
  (xi % c0, lambda x, c0: fold_divmod(x, c0, Ops.MOD)),                 # (a*c+b)%c -> b%c
  ((xi // c0) // c1, lambda x, c0, c1: x // (c0.arg * c1.arg)           # (x//a)//b -> x//(a*b)
    if x.vmin >= 0 and c0.arg > 0 and c1.arg > 0 else None),
  ((xi % c0) // c1, lambda x, c0, c1: (x // c1.arg) % (c0.arg // c1.arg)          # (x%(k*c))//c -> (x//c)%k
    if x.vmin >= 0 and c1.arg > 0 and c0.arg % c1.arg == 0 else None),
  ((xi % c0) % c1, lambda x, c0, c1: x % c1.arg                       # (x%(k*c))%c -> x%c (x%0 is 0: not that)
    if x.vmin >= 0 and c0.arg > 0 and c1.arg > 0 and c0.arg % c1.arg == 0 else None),
  (xi % c0 + (xi // c0) * c0, lambda x, c0: x),                         # x%c + (x//c)*c -> x
  # comparisons
  (xidx + c0 < c1, lambda x, c0, c1: x < (c1.arg - c0.arg)),            # x+c0<c1 -> x<c1-c0
  (c0 < xidx + c1, lambda x, c0, c1: UOp.const(x.dtype, c0.arg - c1.arg) < x),  # c0<x+c1 -> c0-c1<x
  # vectors
  (UPat(Ops.VECTORIZE, name="u"), _whole_vector),                      # (v.x,v.y,v.z,v.w) -> v
  # gates that bounds decided: a load always taken drops its gate, one never taken reads 0
  (UPat(Ops.LOAD, src=(x, y, UPat.cvar("g")), name="u"),
    lambda u, x, y, g: u.replace(src=(x, y)) if g.arg else u.const_like(0)),  # load if True -> load; if False -> 0
  (UPat(Ops.STORE, src=(x, y, UPat.var("v"), UPat.cvar("g")), name="u"),
    lambda u, x, y, v, g: u.replace(src=(x, y, v)) if g.arg else None),     # store if True -> store
])

del x, y, c0, c1, xi, yi, xidx  # (the rules' pattern variables: no later code reads them)

def simplify(u:UOp) -> UOp: return graph_rewrite(u, symbolic)

# ---------------------------------------------------------------------------------------------------------------------
# Views: movement ops never move data. A View maps an index tuple to (address, valid); pad makes `valid` through a
# mask. A reshape that can't be folded into the last view stacks a new one (ShapeTracker = views, outermost last).

def strides_for(shape:tuple[int, ...]) -> tuple[int, ...]:  # row-major: the product of the dims after (a dim of 1: 0)
  return tuple(prod(shape[i + 1:]) if s != 1 else 0 for i, s in enumerate(shape))

def unravel(addr:UOp, shape:tuple[int, ...]) -> list[UOp]:  # a flat row-major address as an index into shape
  return [(addr // st) % s if s > 1 and st else addr.const_like(0) for s, st in zip(shape, strides_for(shape))]

def reshape_strides(shape, strides, new_shape) -> tuple[int, ...]|None:
  """Strides for new_shape over the same memory, or None where a new dim would straddle dims that don't chain. Dims
  that chain (one's stride is the next one's times its size) merge into runs, which the new dims split, last first."""
  runs: list[tuple[int, int]] = []  # (size, the stride of its last dim)
  for s, st in zip(shape, strides):
    if s == 1: continue
    if runs and runs[-1][1] == st * s: runs[-1] = (runs[-1][0] * s, st)  # chains: the run now ends in this dim
    else: runs.append((s, st))
  out = []
  for n in reversed(new_shape):
    if n == 1: out.append(0)
    elif not runs or runs[-1][0] % n: return None  # n must divide the innermost run left
    else:
      size, st = runs.pop()
      if size > n: runs.append((size // n, st * n))  # the rest of the run, outside n
      out.append(st)
  return tuple(reversed(out)) if not runs else None

def _window(lo:int, hi:int, size:int) -> tuple[int, int]:  # a mask's valid range, clipped; (0, 0) when empty
  lo, hi = max(0, lo), min(hi, size)
  return (lo, hi) if lo < hi else (0, 0)

@dataclass(frozen=True)
class View:
  shape: tuple[int, ...]
  strides: tuple[int, ...]
  offset: int = 0
  mask: tuple[tuple[int, int], ...]|None = None
  @property
  def reads_pad(self) -> bool: return self.mask is not None and self.mask != tuple((0, s) for s in self.shape)
  @staticmethod
  def contiguous(shape) -> View: return View(tuple(shape), strides_for(tuple(shape)))
  @functools.cached_property
  def is_contiguous(self) -> bool:
    return self.offset == 0 and self.mask is None and self.strides == strides_for(self.shape)

  def index(self, idxs:Sequence[UOp]) -> tuple[UOp, UOp|None]:
    addr = UOp.const(dtypes.index, self.offset)
    for i, s, st in zip(idxs, self.shape, self.strides):
      if s != 1 and st != 0: addr = addr + i * st
    # lo <= i < hi, only the bounds the mask adds (0 <= i < s holds already); lo <= i as lo-1 < i: < is the compare
    # the index rules fold
    def inside(i:UOp, s:int, lo:int, hi:int) -> list[UOp]:
      return ([UOp.const(dtypes.index, lo - 1) < i] if lo > 0 else []) + ([i < hi] if hi < s else [])
    valid = all_of(*[t for i, s, (lo, hi) in zip(idxs, self.shape, self.mask or ()) for t in inside(i, s, lo, hi)])
    return addr, valid

  def reshape(self, shape:tuple[int, ...]) -> View|None:
    if 0 in self.shape: return View.contiguous(shape)  # nothing to address
    if self.mask is not None:  # a masked view only folds a reshape that adds or drops size-1 dims (all valid ones)
      if [s for s in shape if s != 1] != [s for s in self.shape if s != 1]: return None
      if any(m != (0, 1) for s, m in zip(self.shape, self.mask) if s == 1): return None
      # the dims other than 1 in the new shape are the old ones, in order: each keeps its mask and stride
      real = iter([(m, st) for s, m, st in zip(self.shape, self.mask, self.strides) if s != 1])
      kept = [next(real) if s != 1 else ((0, 1), 0) for s in shape]
      return View(shape, tuple(st for _, st in kept), self.offset, tuple(m for m, _ in kept))
    strides = reshape_strides(self.shape, self.strides, shape)
    return None if strides is None else View(shape, strides, self.offset)
  def permute(self, order) -> View:
    pick = lambda xs: tuple(xs[i] for i in order)  # noqa: E731
    return View(pick(self.shape), pick(self.strides), self.offset, None if self.mask is None else pick(self.mask))
  def expand(self, shape) -> View:
    # an expanded dim of 1 is valid all along (0, n), or nowhere (0, 0)
    mask = None if self.mask is None else tuple(m if s == n or m == (0, 0) else (0, n)
                                                for m, s, n in zip(self.mask, self.shape, shape))
    return View(tuple(shape), tuple(st if s == n else 0 for st, s, n in zip(self.strides, self.shape, shape)),
                self.offset, mask)
  def shrink(self, arg) -> View:
    mask = None if self.mask is None else tuple(_window(lo-b, hi-b, e-b) for (lo, hi), (b, e) in zip(self.mask, arg))
    return View(tuple(e-b for b, e in arg), self.strides,
                self.offset + sum(b*st for (b, _), st in zip(arg, self.strides)), mask)
  def pad(self, arg) -> View:
    mask = tuple((lo+b, hi+b) for (lo, hi), (b, _) in zip(self.mask or [(0, s) for s in self.shape], arg))
    return View(tuple(s+b+a for s, (b, a) in zip(self.shape, arg)), self.strides,
                self.offset - sum(b*st for (b, _), st in zip(arg, self.strides)), mask)
  def flip(self, axes) -> View:
    mask = None if self.mask is None else tuple((s-hi, s-lo) if i in axes else (lo, hi)
                                                for i, (s, (lo, hi)) in enumerate(zip(self.shape, self.mask)))
    return View(self.shape, tuple(-st if i in axes else st for i, st in enumerate(self.strides)),
                self.offset + sum((s-1)*st for i, (s, st) in enumerate(zip(self.shape, self.strides)) if i in axes),
                mask)

class Move(NamedTuple):  # a movement op: a View method's name, and its arg
  name: str
  arg: Any

@dataclass(frozen=True)
class ShapeTracker:
  """Views, and how they were made: the last movement op and the tracker it was applied to (None where the views
  begin), which gradients walk back, each move through its inverse. They are part of equality, so views made by
  different moves stay different nodes (x.reshape(12).reshape(3, 4) is not x: its gradient passes through the (12,)
  view); the scheduler drops them (`bare`): a kernel is keyed by what it reads. Unlike movement ops as nodes until
  scheduling (a node per move, folded again on every realize), a chain of moves stays one VIEW node."""
  views: tuple[View, ...]
  move: Move|None = None
  before: ShapeTracker|None = None
  def __hash__(self): return self._hash
  def __repr__(self): return f"ShapeTracker({self.views!r})"  # (the views only: UOp._key and the disk cache read it)
  @functools.cached_property
  def _hash(self) -> int: return hash((self.views, self.move, self.before))
  @functools.cached_property
  def history(self) -> tuple[ShapeTracker, tuple[Move, ...]]:  # the tracker its moves began from, and the moves
    if self.before is None: return self, ()
    start, moves = self.before.history
    return start, moves + (self.move,)
  @property
  def detached(self) -> bool: return self.history[0].move is not None  # its moves begin at a detach (no gradient back)
  @functools.cached_property
  def path(self) -> tuple[ShapeTracker, tuple[Move, ...]]:
    """history, continued past a detach of a buffer's view (Move("detach", the tracker it detached)) into the moves
    that made that view: where a write through it finds all of the buffer. The detach stays among the moves, as
    Move("detach", None); the gradient walk reads history, which stops there."""
    start, moves = self.history
    if start.move is None or start.move.arg is None: return start, moves
    first, before = start.move.arg.path
    return first, before + (Move("detach", None),) + moves
  def since(self, start:ShapeTracker) -> tuple[Move, ...]|None:  # the moves that made this from start (None: not so)
    if self is start or self == start: return ()  # (is: most often, and cheap)
    if self.before is None or (moves := self.before.since(start)) is None: return None
    return moves + (self.move,)
  @functools.cached_property
  def bare(self) -> ShapeTracker: return self if self.move is None else ShapeTracker(self.views)
  # graphs are built again and again with the same shapes: equal shapes give one tracker object, so the nodes that
  # hold it hash-cons cheaply
  @staticmethod
  @functools.lru_cache(maxsize=4096)
  def contiguous(shape:tuple[int, ...]) -> ShapeTracker: return ShapeTracker((View.contiguous(shape),))
  @property
  def shape(self) -> tuple[int, ...]: return self.views[-1].shape
  @functools.cached_property
  def is_contiguous(self) -> bool: return len(self.views) == 1 and self.views[0].is_contiguous
  def index(self, idxs:Sequence[UOp]) -> tuple[UOp, UOp|None]:
    """Address and validity of an element: evaluate the outer view, then unravel its address into each inner view."""
    addr, valid = self.views[-1].index(idxs)
    for view in reversed(self.views[:-1]):
      addr, inner = view.index(unravel(addr, view.shape))
      valid = all_of(valid, inner)
    return addr, valid
  @functools.lru_cache(maxsize=4096)  # (one move on one tracker gives one object: the nodes over it hash-cons cheaply)
  def apply(self, fn:str, arg) -> ShapeTracker:
    """The movement op fn (a View method's name) on the outermost view; a reshape it can't fold stacks a new view."""
    if (view := getattr(self.views[-1], fn)(arg)) is not None: views = self.views[:-1] + (view,)
    else: views = self.views + (View.contiguous(arg),)  # (only reshape gives None)
    return ShapeTracker(views, Move(fn, arg), self)

# ---------------------------------------------------------------------------------------------------------------------
# Tensor: a thin wrapper around one UOp. Every op builds graph, composed here from the primitives (ALU ops, REDUCE_AXIS
# and views); kernels run when a value is asked for (realize(), tolist(), item(), numpy()), and when assign() (t += 1,
# t[i] = v, an optimizer's step) first realizes what reads the buffer it overwrites.

class ShapeError(ValueError, RuntimeError):  # (a ValueError as numpy raises, a RuntimeError as torch and tinygrad)
  """A shape an op can't work with."""

def check_shape(shape:tuple) -> tuple[int, ...]:
  """The shape a creation or movement op makes, checked there: sizes are ints >= 0, and an int64 counts the elements."""
  if not all(isinstance(s, (int, numbers.Integral)) and s >= 0 for s in shape):  # int first: the common case is quick
    raise ShapeError(f"shape {tuple(shape)}: sizes must be ints >= 0")
  if prod(shape) > 2**63 - 1:  # int64's max
    raise ShapeError(f"shape {tuple(shape)} has {prod(shape)} elements: more than an int64 index can count")
  return tuple(map(int, shape))  # (numpy's ints made Python's: equal, they would share nodes and reach the disk cache)

def _flatten(data) -> tuple[list, tuple[int, ...]]:
  if not isinstance(data, (list, tuple)): return [data], ()
  if not any(isinstance(d, (list, tuple)) for d in data): return list(data), (len(data),)
  parts = [_flatten(d) for d in data]
  if any(shape != parts[0][1] for _, shape in parts):
    raise ShapeError(f"ragged nested list: can't make a tensor of {data!r}")
  return [v for vals, _ in parts for v in vals], (len(data),) + parts[0][1]
def unpacked(args:tuple) -> tuple:  # f(3, 7) or f((3, 7)); stack(a, b) or stack([a, b])
  return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args

def _checked(d:DType, v):
  """v as a Python value of dtype d. An int out of d's range raises: wrapped (truncate), it would quietly change."""
  x = dtypes.python(d)(v)
  if dtypes.is_int(d) and not dtypes.fits(d, x):
    raise OverflowError(f"{v!r} is out of range for {d} ({dtypes.min(d)} to {dtypes.max(d)})")
  return x

def _dtype_of_list(vals:list) -> DType:
  """The promotion of the elements' dtypes, told by their Python types and the ints' extremes (no call per element)."""
  kinds = set(map(type, vals))
  if not kinds <= {bool, int, float}: return dtypes.promote(*{dtypes.from_py(v) for v in vals})
  if float in kinds or not vals: return dtypes.default_float
  lo, hi = min(vals), max(vals)
  if lo >= 0 and not dtypes.fits(dtypes.int64, hi): return dtypes.uint64  # (as numpy: no signed int holds them)
  return dtypes.promote(dtypes.from_py(lo), dtypes.from_py(hi))

def broadcast_shape(*shapes:tuple[int, ...]) -> tuple[int, ...]:
  n = max(len(s) for s in shapes)
  padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
  sizes = [{d for d in dims if d != 1} for dims in zip(*padded)]  # each dim's sizes other than 1: at most one
  if any(len(s) > 1 for s in sizes):
    raise ShapeError(f"shapes {' and '.join(map(str, shapes))} can't be broadcast together")
  return tuple(max(s, default=1) for s in sizes)

class EdgePad(NamedTuple):  # a pad mode that continues the values past an edge, with views and cat
  widest: Callable  # widest(size): the largest pad a side of a dim of that size allows
  pieces: Callable  # pieces(x, dim, size, before, after): the views that go before and after the dim

def _reflected(x, dim, size, before, after):  # 3 2 1 | 0 1 2 3 | 2 1 0: the edge itself isn't repeated
  return x._along(dim, 1, before + 1).flip(dim), x._along(dim, size - 1 - after, size - 1).flip(dim)
def _replicated(x, dim, size, before, after):  # 0 0 0 | 0 1 2 3 | 3 3 3
  def edge(at:int, n:int): return x._along(dim, at, at + 1).expand(*[n if i == dim else -1 for i in range(x.ndim)])
  return edge(0, before), edge(size - 1, after)
def _circular(x, dim, size, before, after):  # 1 2 3 | 0 1 2 3 | 0 1 2: at most once around
  return x._along(dim, size - before, size), x._along(dim, 0, after)

EDGE_PADS = {"reflect": EdgePad(lambda size: size - 1, _reflected),
             "replicate": EdgePad(lambda size: math.inf if size else 0, _replicated),
             "circular": EdgePad(lambda size: size, _circular)}

def per_dim(v, dims:int) -> tuple:  # an int for every dim, or one for each (a conv's or a pool's stride, kernel, ...)
  if isinstance(v, numbers.Integral): return (v,) * dims
  if isinstance(v, str) or not all(isinstance(a, numbers.Integral) for a in v):  # (torch's padding="same": not here)
    raise TypeError(f"expected an int, or an int for each dim, not {v!r}")
  return tuple(v)

class Pooling(NamedTuple):
  """A pool's kernel, stride and dilation per dim, its padding as (before, after) pairs, and what ceil_mode adds after
  each dim: enough for one more window where the last would start inside the input or its padding before."""
  kernel: tuple
  stride: tuple
  dilation: tuple
  pads: list[tuple[int, int]]
  extra: list[int]
  @property
  def grown(self) -> list[tuple[int, int]]: return [(b, a + e) for (b, a), e in zip(self.pads, self.extra)]

def flat_pairs(padding:Sequence[int], dims:int) -> list[tuple[int, int]]:
  """torch's flat padding (the last dim's before and after, then the one before it's, ...): a pair for each of dims."""
  if len(padding) % 2: raise ShapeError(f"flat padding {padding} needs pairs")
  pairs = [tuple(padding[i:i+2]) for i in range(0, len(padding), 2)][::-1]
  return [(0, 0)] * (dims - len(pairs)) + pairs
def pad_pairs(padding, dims:int) -> list[tuple[int, int]]:  # (before, after) for each of the last dims, from an amount
  padding = per_dim(padding, dims)  # for each, or torch's flat pairs
  return [(p, p) for p in padding] if len(padding) == dims else flat_pairs(padding, dims)

class Bounded(dict):
  """A cache keyed by what callers pass, of at most `most` entries: past that, the one put in first goes."""
  most = 4096  # (plans, programs, templates: a model's steps make tens to hundreds of each)
  def __setitem__(self, key, value):
    if len(self) >= self.most and key not in self: self.pop(next(iter(self)), None)
    super().__setitem__(key, value)

def composite(fn:Callable) -> Callable:
  """A method composed of others builds one graph for all calls with inputs of equal shapes, dtypes and devices and
  equal other arguments: built once over placeholders, it is made again over each call's inputs, node for node, without
  the shape checks and broadcasts (a model step's graph builds 3x as fast). How: the last section (replayed)."""
  templates = Bounded()
  @functools.wraps(fn)
  def built(*args, **kwargs) -> Tensor: return replayed(fn, templates, args, kwargs)
  return built

def via_float32(fn:Callable) -> Callable:
  """A float function computed in float32 at least, and rounded once to the tensor's float dtype (an int's: the
  default float), as torch's: a 16-bit float rounded at each step made half's exp(10) 5 ulps off, its cos near pi/2 0,
  and its x^2 (acosh of 300) pass its largest value. (Not every dialect has 16-bit transcendentals either.)"""
  @functools.wraps(fn)
  def wrapped(self, *args, **kwargs) -> Tensor:
    if self.dtype.itemsize >= 4: return fn(self, *args, **kwargs)
    return fn(self.float(), *args, **kwargs).cast(self._float().dtype)
  return wrapped

def creates(fn:Callable) -> staticmethod:
  """A static method that makes a tensor: it takes requires_grad= too, as tinygrad's do, and sets it on the tensor."""
  @functools.wraps(fn)
  def create(*args, requires_grad:bool|None=None, **kwargs) -> Tensor:
    t = fn(*args, **kwargs)
    if requires_grad is not None: t.requires_grad = requires_grad
    return t
  return staticmethod(create)

class Tensor:
  _seed, _counter = 0, 0
  # Every tensor by id, in the order made, where assign() finds a buffer's readers: weak references without callbacks
  # (a WeakValueDictionary made building a model step 15% slower); a dead one stays until _alive() drops it.
  _live: dict[int, weakref.ref] = {}
  # The tensors that require grad, where backward() puts gradients (by id: a WeakSet compares with ==, elementwise)
  _trainable: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
  grad: Tensor|None = None  # filled by backward() where requires_grad is set
  # a view's owner (see _viewing), weakly: one kept alive would be a reader of writes, a leaf given gradients
  owner_ref: weakref.ref|None = None
  graph_viewed = False  # views that read its graph, not a buffer, were taken from it (_hold points them at its buffer)
  training = False  # set by Tensor.train(); dropout and batch norm train where it is, or under TRAINING=1 (tinygrad's)
  @staticmethod
  def _training() -> bool: return Tensor.training or getenv("TRAINING") > 0
  def __init__(self, data, dtype:DType|str|None=None, device:str|None=None, requires_grad:bool|None=None):
    dtype = None if dtype is None else dtypes.of(dtype)
    self.device = Device.canonical(device)
    if isinstance(data, UOp): self.uop = data
    elif isinstance(data, (bool, int, float)) or data is None:  # (None: a 0, as tinygrad's)
      data = 0.0 if data is None else data
      dtype = dtype or dtypes.from_py(data)
      self.uop = UOp.const(dtype, _checked(dtype, data))
    else: self.uop = self._copied_in(data, dtype)
    if requires_grad is not None: self.requires_grad = requires_grad
    self._enlist()
  def _enlist(self):  # into Tensor._live (popped first: a reused id moves to the end, keeping the order made)
    Tensor._live.pop(id(self), None)
    Tensor._live[id(self)] = weakref.ref(self)
  def _copied_in(self, data, dtype:DType|None) -> UOp:  # a list's values or a buffer's bytes, in device memory
    if isinstance(data, (list, tuple)):
      vals, shape = _flatten(data)
      own = _dtype_of_list(vals)  # also where a dtype is given: it checks that every element is a number
      dtype = dtype or own
      try: raw = encoded(dtype, vals)
      except (struct.error, OverflowError):  # a float for an int, or out of the format's range: convert one by one
        raw = encoded(dtype, [truncate(dtype, _checked(dtype, v)) for v in vals])
    elif isinstance(data, (bytes, bytearray)) and dtype is not None:  # memory of dtype's items, as tinygrad's
      if len(data) % dtype.itemsize: raise ValueError(f"{len(data)} bytes aren't whole {dtype.name}s")
      shape, raw = (len(data) // dtype.itemsize,), bytes(data)
    else:
      try: mv = memoryview(data)
      except TypeError: raise TypeError(f"can't make a Tensor from {type(data).__name__}") from None
      fmt = mv.format.lstrip("@=<")
      if fmt not in dtypes.by_fmt:
        raise TypeError(f"buffer format {mv.format!r} has no tiny dtype (tiny has "
                        f"{', '.join(d.name for d in dtypes.all)}); convert it first, e.g. numpy's .astype('float32')")
      shape, own = mv.shape or (), dtypes.by_fmt[fmt]
      if own.itemsize != mv.itemsize: raise TypeError(f"buffer format {mv.format!r} is {mv.itemsize} bytes per item")
      if dtype is not None and dtype != own: return Tensor(data, device=self.device).cast(dtype).uop
      dtype, raw = own, mv.tobytes()
    uop = Tensor.empty(*shape, dtype=dtype, device=self.device).uop
    uop.src[0].arg.copyin(memoryview(raw))
    # (made in a TinyJit's capture: a replay checks it is the same, and fills the buffer it makes again)
    if capturing.now is not None:
      capturing.now.data.append(hash(raw))
      capturing.now.filled[uop.src[0].arg] = raw
    return uop

  # --- properties
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def nbytes(self) -> int: return self.numel() * self.dtype.itemsize
  def size(self, dim:int|None=None): return self.shape if dim is None else self.shape[self._dim(dim)]
  def element_size(self) -> int: return self.dtype.itemsize
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)
  @property
  def max_shape(self) -> tuple[int, ...]: return self.shape  # (every dim of a tiny shape is an int: none is symbolic)
  def max_numel(self) -> int: return self.numel()
  def __len__(self):
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __bool__(self) -> bool:  # so that `if t:` and `t in [u]` mean its value, not "a Tensor object exists"
    if self.numel() != 1: raise ShapeError(f"the truth value of a tensor of shape {self.shape} is ambiguous: only a "
                                           "tensor of one element is True or False")
    return bool(self.item())
  def __repr__(self): return f"<Tensor {self.uop.op.name} {self.shape} {self.dtype.name} on {self.device}>"

  # --- creation
  @creates
  def full(shape, fill_value, dtype=None, device=None, buffer=True) -> Tensor:
    # (buffer=, as rand's contiguous=: tinygrad's request to store the values, which tiny's scheduler decides)
    shape = check_shape(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,))
    return Tensor(fill_value, dtype, device).reshape((1,) * len(shape)).expand(shape)
  @creates
  def zeros(*shape, dtype=None, device=None) -> Tensor: return Tensor.full(unpacked(shape), 0.0, dtype, device)
  @creates
  def ones(*shape, dtype=None, device=None) -> Tensor: return Tensor.full(unpacked(shape), 1.0, dtype, device)
  @creates
  def empty(*shape, dtype=None, device=None) -> Tensor:
    shape, dtype = check_shape(unpacked(shape)), dtypes.of(dtype or dtypes.default_float)
    buf = UOp(Ops.BUFFER, dtype, (), Buffer(Device.canonical(device), prod(shape), dtype))
    if capturing.now is not None: capturing.now.made.add(buf.arg)  # (a replay makes its own)
    return Tensor(UOp(Ops.VIEW, dtype, (buf,), ShapeTracker.contiguous(shape)), device=device)
  @staticmethod
  @composite
  def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    if stop is None: start, stop = 0, start
    n = check_shape((max(0, math.ceil((stop - start) / step)),))[0]
    ends = (start, start + max(n - 1, 0) * step)  # its first and last values
    floats = any(isinstance(v, float) for v in (start, stop, step))
    # (int32 unless a value it holds needs int64, as in tinygrad)
    dtype = dtypes.of(dtype or (dtypes.default_float if floats else dtypes.promote(*map(dtypes.from_py, ends))))
    for v in ends: _checked(dtype, v)  # a dtype given must hold them
    # (an int dtype of float steps: computed in floats, each value then truncated, as tinygrad's)
    computed = dtypes.default_float if floats and not dtypes.is_float(dtype) else dtype
    return (Tensor(UOp(Ops.IOTA, dtypes.index, (), n), device=device).cast(computed) * step + start).cast(dtype)
  @creates
  def eye(n:int, m:int|None=None, dtype=None, device=None) -> Tensor:
    rows, cols = check_shape((n, n if m is None else m))
    return Tensor.arange(rows, device=device)._one_hot(cols).cast(dtype or dtypes.default_float)  # row i: i's one-hot
  # *_like: a tensor of this one's shape, and of its dtype and on its device unless told (kw: device=, requires_grad=)
  def _made_like(self, make:Callable, *args, dtype=None, device=None, **kw) -> Tensor:
    return make(self.shape, *args, dtype=dtype or self.dtype, device=device or self.device, **kw)
  def full_like(self, fill_value, dtype=None, **kw) -> Tensor:
    return self._made_like(Tensor.full, fill_value, dtype=dtype, **kw)
  def zeros_like(self, dtype=None, **kw) -> Tensor: return self.full_like(0, dtype, **kw)
  def ones_like(self, dtype=None, **kw) -> Tensor: return self.full_like(1, dtype, **kw)
  def empty_like(self, dtype=None, **kw) -> Tensor: return self._made_like(Tensor.empty, dtype=dtype, **kw)
  def rand_like(self, dtype=None, **kw) -> Tensor: return self._made_like(Tensor.rand, dtype=dtype, **kw)
  def randn_like(self, dtype=None, **kw) -> Tensor: return self._made_like(Tensor.randn, dtype=dtype, **kw)
  @staticmethod
  def const(value, dtype=None) -> Tensor: return Tensor(value, dtype)
  const_like = full_like
  @staticmethod
  def linspace(start, stop, steps:int, dtype=None, device=None) -> Tensor:
    if steps < 0 or dtype in (dtypes.bool, "bool"):
      raise ValueError(f"linspace needs steps >= 0 and no bool dtype, got {steps}, {dtype}")
    step = (stop - start) / (steps - 1) if steps > 1 else 0
    return (Tensor.arange(steps, device=device) * step + start).cast(dtype or dtypes.default_float)
  def _tri(self, diagonal:int, lower:bool) -> Tensor:  # the last two dims' triangle, on and below (or above) a diagonal
    if self.ndim < 2: raise ShapeError(f"tril and triu need a tensor of at least 2 dims, got shape {self.shape}")
    rows, cols = (Tensor.arange(self.shape[-2], device=self.device).unsqueeze(-1),
                  Tensor.arange(self.shape[-1], device=self.device))
    return ((cols <= rows + diagonal) if lower else (cols >= rows + diagonal)).where(self, self.zeros_like())
  def tril(self, diagonal:int=0) -> Tensor: return self._tri(diagonal, lower=True)
  def triu(self, diagonal:int=0) -> Tensor: return self._tri(diagonal, lower=False)
  def one_hot(self, num_classes:int) -> Tensor:
    if not dtypes.is_int(self.dtype): raise DTypeError(f"one_hot needs an int tensor, got {self.dtype.name}")
    if num_classes < 0: raise ValueError(f"one_hot needs num_classes >= 0, got {num_classes}")
    return self._one_hot(num_classes).where(1, 0)
  def _one_hot(self, n:int, dim:int=-1) -> Tensor:  # a new dim of n (bool): [..., k, ...] is whether the element is k
    d = self._dim(dim, extra=1)
    at = self if self.dtype != dtypes.uint64 else self.cast(dtypes.int64)  # (no int holds both uint64 and the arange's)
    return at.unsqueeze(d) == Tensor.arange(n, device=self.device).reshape(n, *(1,) * (self.ndim - d))
  def meshgrid(self, *others:Tensor, indexing="ij") -> tuple[Tensor, ...]:
    if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid indexing is 'ij' or 'xy', not {indexing!r}")
    ts = (self, *others)
    grids = [t.reshape([-1 if d == k else 1 for d in range(len(ts))]).expand([u.numel() for u in ts])
             for k, t in enumerate(ts)]  # tensor k varies along dim k; xy swaps the first two
    return tuple(g.transpose(0, 1) if indexing == "xy" and len(ts) > 1 else g for g in grids)

  @staticmethod
  def manual_seed(seed:int=0): Tensor._seed, Tensor._counter = seed, 0
  @staticmethod
  def _bits(shape, device=None) -> Tensor:
    """32 random bits per element: a counter-based hash of (seed, counter + index), computed on the device. The
    counter advances when the op is created, so each rand differs and repeats whatever order it is realized in."""
    n = prod(check_shape(shape))
    start, Tensor._counter = Tensor._counter, Tensor._counter + n
    x = Tensor(UOp(Ops.IOTA, dtypes.index, (), n), device=device).cast(dtypes.uint32) + Tensor._place(start, device)
    for mul in (0x7FEB352D, 0x846CA68B):  # lowbias32's multipliers (xor-shift, multiply, twice); shifts of 16 here
      x = (x ^ (x >> 16)) * mul
    return (x ^ (x >> 16)).reshape(shape)
  @staticmethod
  def _place(start:int, device=None) -> Tensor:
    """Where a rand call starts in the seeded sequence, as data, not a constant in the source, so that every rand call
    runs the same compiled kernel. A TinyJit capturing notes it, and each replay writes its own call's place."""
    t = Tensor.empty(1, dtype=dtypes.uint32, device=device)
    buf = t.buffer()
    # 0x9E3779B9 is 2**32 over the golden ratio: nearby seeds start far apart in the sequence
    buf.copyin(memoryview(struct.pack("I", (start + 0x9E3779B9 * (Tensor._seed + 1)) % 2**32)))
    if capturing.now is not None: capturing.now.data.append(Place(start, buf))
    return t
  @creates
  def rand(*shape, dtype=None, device=None, contiguous=True) -> Tensor:
    bits, dtype = Tensor._bits(unpacked(shape), device), dtypes.of(dtype or dtypes.default_float)
    if not dtypes.is_float(dtype): raise ValueError(f"rand makes floats, not {dtype.name}")  # (tinygrad's error type)
    kept = {dtypes.half: 11, dtypes.bfloat16: 8}.get(dtype, 24)  # a fraction of the bits dtype holds: below 1, exact
    return ((bits >> (32 - kept)).cast(dtypes.float) * (1 / 2**kept)).cast(dtype)
  @creates
  def uniform(*shape, low=0.0, high=1.0, dtype=None, device=None) -> Tensor:
    if not low < high: raise ValueError(f"uniform needs low < high, got {low} and {high}")
    return (Tensor.rand(*shape, device=device) * (high - low) + low).cast(dtype or dtypes.default_float)
  @creates
  def kaiming_uniform(*shape, a:float=0.01, dtype=None, device=None) -> Tensor:  # He et al.: a leaky relu's slope a
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(unpacked(shape)[1:]))
    return Tensor.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device)
  @creates
  def glorot_uniform(*shape, dtype=None, device=None) -> Tensor:  # Glorot and Bengio: fan in and fan out
    shape = unpacked(shape)
    bound = math.sqrt(6 / (shape[0] + prod(shape[1:])))
    return Tensor.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device)
  @creates
  def randn(*shape, dtype=None, device=None) -> Tensor:
    u1, u2 = Tensor.rand(*shape, device=device), Tensor.rand(*shape, device=device)
    # Box and Muller: sqrt(-2 ln u1) cos(2 pi u2), with 1 - u1 in (0, 1] (no log 0) and cos(t) as sin(t + pi/2)
    box_muller = ((1 - u1).log() * -2).sqrt().mul((u2 * (2 * math.pi) + math.pi / 2).sin())
    return box_muller.cast(dtype or dtypes.default_float)
  @creates
  def normal(*shape, mean=0.0, std=1.0, dtype=None, device=None) -> Tensor:
    if std < 0: raise ValueError(f"normal needs std >= 0, got {std}")
    return (Tensor.randn(*shape, device=device) * std + mean).cast(dtype or dtypes.default_float)
  @staticmethod
  def randint(*shape, low=0, high=10, dtype=dtypes.int32, device=None) -> Tensor:
    if not all(isinstance(v, int) for v in (low, high)):
      raise TypeError(f"randint's low={low} and high={high} are ints")
    if low >= high: raise ValueError(f"randint needs low < high, got low={low}, high={high}")
    # (the cast truncates: of a value >= 0, that is its floor)
    return ((Tensor.rand(*shape, device=device) * (high - low)).cast(dtypes.int64) + low).cast(dtype)
  @staticmethod
  def randperm(n:int, device=None, dtype=dtypes.int32) -> Tensor:
    return Tensor.rand(n, device=device).argsort().cast(dtype)
  @creates
  def scaled_uniform(*shape, dtype=None, device=None) -> Tensor:
    return Tensor.uniform(*shape, low=-1.0, high=1.0, dtype=dtype, device=device) * prod(unpacked(shape)) ** -0.5
  @creates
  def kaiming_normal(*shape, a:float=0.01, dtype=None, device=None) -> Tensor:
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(unpacked(shape)[1:]))
    return Tensor.normal(*shape, mean=0.0, std=std, dtype=dtype, device=device)
  def multinomial(self, num_samples:int=1, replacement:bool=False) -> Tensor:
    """Indices drawn with probabilities proportional to the weights of each row: where a uniform sample falls in the
    weights' running sum (with replacement), or the num_samples largest of log(u) / w (without: Efraimidis-Spirakis)."""
    if not 1 <= self.ndim <= 2 or num_samples < 1:
      raise ShapeError(f"multinomial takes 1 or 2 dims and num_samples >= 1, got shape {self.shape}, {num_samples}")
    w = self.unsqueeze(0) if self.ndim == 1 else self
    if not replacement and num_samples > w.shape[1]:
      raise ValueError(f"can't draw {num_samples} of {w.shape[1]} without replacement")
    if replacement or num_samples == 1:
      cdf = w.float().cumsum(1)
      u = Tensor.rand(num_samples, w.shape[0], 1, device=self.device) * cdf[:, -1:].unsqueeze(0)  # (samples, rows, 1)
      picks = (u >= cdf.unsqueeze(0)).sum(2).permute(1, 0)  # how many running sums u passes: the class drawn
    else: picks = (w.rand_like(dtype=dtypes.float).log() / w).topk(num_samples, 1)[1]
    return (picks.squeeze(0) if self.ndim == 1 else picks).cast(dtypes.int32)
  def dropout(self, p:float=0.5) -> Tensor:  # zeroes each element with probability p in Tensor.train(), scales the rest
    if not 0 <= p <= 1: raise ValueError(f"dropout's p={p} is not in [0, 1]")
    if not Tensor._training() or p == 0: return self
    if p == 1: return self * 0
    return (Tensor.rand(*self.shape, device=self.device) >= p).where(self, 0) * (1 / (1 - p))

  # --- elementwise
  def _const(self, v) -> Tensor:
    """A Python scalar takes this tensor's dtype where it is of the same kind or a lower one (an int with an int
    tensor, any number with a float one), as in numpy 2 and tinygrad. An int that dtype can't hold wraps into it, as
    in tinygrad and torch (uint8 + -1 adds 255)."""
    if isinstance(v, Tensor): return v
    if not isinstance(v, (bool, int, float)):
      if not isinstance(v, numbers.Real): raise TypeError(f"can't combine a Tensor with {type(v).__name__}")
      v = int(v) if isinstance(v, numbers.Integral) else float(v)  # (numpy's scalars)
    same_kind = dtypes.is_float(self.dtype) or isinstance(v, bool) or (isinstance(v, int) and self.dtype != dtypes.bool)
    dtype = self.dtype if same_kind else dtypes.from_py(v)
    return self._like(UOp.const(dtype, truncate(dtype, v) if dtypes.is_int(dtype) else _checked(dtype, v)))
  def _broadcast(self, *others, promote:bool=True) -> list[Tensor]:
    """Operands expanded to one shape and, with promote, cast to the dtype they meet in."""
    ts = [self, *map(self._const, others)]
    if len({(t.uop.shape, t.uop.dtype, t.device) for t in ts}) == 1: return ts  # (the common case, checked at once)
    if any(t.device != self.device for t in ts):
      raise RuntimeError(f"can't combine tensors on {' and '.join(t.device for t in ts)}")  # (tinygrad's error)
    shape = broadcast_shape(*[t.shape for t in ts])
    if promote:
      dtype = dtypes.promote(*[t.dtype for t in ts])
      ts = [t.cast(dtype) for t in ts]
    return [t if t.shape == shape else t._expand(shape) for t in ts]
  def _like(self, uop:UOp) -> Tensor: return Tensor._of(uop, self.device)  # a new tensor on this one's device
  @staticmethod
  def _of(uop:UOp, device:str) -> Tensor:  # a tensor of a node, on a device __init__ has checked once
    t = Tensor.__new__(Tensor)
    t.uop, t.device = uop, device
    t._enlist()
    return t
  @composite
  def _alu(self, op:Ops, *others) -> Tensor:
    ts = self._broadcast(*others)
    return self._like(ts[0].uop.alu(op, *[t.uop for t in ts[1:]]))
  alu = _alu
  def _float(self) -> Tensor: return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
  @via_float32
  def _unary(self, op:Ops) -> Tensor: return self._like(self._float().uop.alu(op))

  def add(self, x) -> Tensor: return self._alu(Ops.ADD, x)
  def mul(self, x) -> Tensor: return self._alu(Ops.MUL, x)
  def sub(self, x) -> Tensor:
    a, b = self._broadcast(x)
    if a.dtype == dtypes.bool: raise TypeError("can't subtract bool tensors, as numpy and torch can't: use ^ or & ~")
    return a + (-b)
  def div(self, x, rounding_mode:str|None=None) -> Tensor:  # true division, or rounded toward 0 ("trunc") or down
    a, b = self._broadcast(x)
    if rounding_mode not in (None, "trunc", "floor"):
      raise RuntimeError(f"rounding_mode is None, 'trunc' or 'floor', not {rounding_mode!r}")  # (torch's error)
    if rounding_mode == "floor": return a.divmod(b)[0]
    if rounding_mode == "trunc": return a._div_toward_zero(b)
    if a.dtype in dtypes.narrow: return (a.float() / b.float()).cast(a.dtype)  # (in float32, rounded once)
    return a._float()._alu(Ops.FDIV, b._float())  # (rounded once: x * (1/b) is 1 ulp off, and 1/b overflows for 1e-40)
  def _div_toward_zero(self, b:Tensor) -> Tensor:
    """The quotient rounded toward 0, as torch's: C's / for ints; for floats, (x - fmod(x, b)) / b rounded to the whole
    number it is but for rounding (exact, where x * (1/b), 1 ulp off, would cut 183/61 to 2), and x / 0 where b is 0."""
    if dtypes.is_int(self.dtype): return self._like(self.uop.alu(Ops.IDIV, b.uop))
    q = self / b  # (where b is 0 or x infinite: x / b, as torch's)
    quotient = (self - self.fmod(b)) / b  # a whole number but for rounding: self - fmod(self, b) is a multiple of b
    return ((b == 0) | self.isinf()).where(q, quotient.round()._signed_zero(q))
  def divmod(self, x) -> tuple[Tensor, Tensor]:
    """Floor division and its remainder, as Python's and torch's: the remainder takes the divisor's sign. Both from the
    quotient rounded toward 0 and its remainder, fmod (C's %; by 0, an int's is 0 and a float's nan: python_alu's)."""
    a, b = self._broadcast(x)
    q, r = a._div_toward_zero(b), a.fmod(b)
    up = (r != 0) & ((r < 0) != (b < 0))  # rounded toward 0, a negative quotient rounded up: floor is one lower
    return up.where(q - 1, q), up.where(r + b, r)
  def neg(self) -> Tensor:  # -True is -1 in Python and an error in numpy and torch: never quietly "not"
    if self.dtype == dtypes.bool: raise TypeError("can't negate a bool tensor, as numpy and torch can't: use ~ for not")
    return self._like(self.uop.alu(Ops.NEG))
  def reciprocal(self) -> Tensor: return self._unary(Ops.RECIP)  # (a half's in float32 too: CUDA has no float / half)
  __add__, __sub__, __mul__, __truediv__, __neg__ = add, sub, mul, div, neg
  def __floordiv__(self, x): return self.divmod(x)[0]
  def __mod__(self, x): return self.divmod(x)[1]
  def __lt__(self, x): return self._alu(Ops.CMPLT, x)
  def __gt__(self, x): return self._const(x)._alu(Ops.CMPLT, self)
  def __ge__(self, x): return (self > x) | (self == x)  # not "not <": nan >= 1 is False
  def __le__(self, x): return (self < x) | (self == x)
  def __eq__(self, x): return self._alu(Ops.CMPEQ, x)  # type: ignore[override]
  def __ne__(self, x): return self._alu(Ops.CMPNE, x)  # type: ignore[override]
  __hash__ = object.__hash__
  def _bitop(self, op:Ops, x) -> Tensor:
    if dtypes.is_float(self.dtype) or (isinstance(x, Tensor) and dtypes.is_float(x.dtype)) or isinstance(x, float):
      other = x.dtype.name if isinstance(x, Tensor) else type(x).__name__
      raise DTypeError(f"{op.name.lower()} needs int or bool tensors, got {self.dtype.name} and {other}")
    return self._alu(op, x)
  def __and__(self, x): return self._bitop(Ops.AND, x)
  def __or__(self, x): return self._bitop(Ops.OR, x)
  def __xor__(self, x): return self._bitop(Ops.XOR, x)
  def __rshift__(self, n:int): return self._bitop(Ops.SHR, n)
  def __lshift__(self, n:int): return self._bitop(Ops.SHL, n)
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool)._alu(Ops.CMPNE, True)
  def __invert__(self) -> Tensor:  # xor with all ones: -1 for a signed int, the largest value for an unsigned one
    return self.logical_not() if self.dtype == dtypes.bool else self._bitop(Ops.XOR, truncate(self.dtype, -1))
  def maximum(self, x) -> Tensor: return self._alu(Ops.MAX, x)
  def minimum(self, x) -> Tensor:  # through max, so a nan wins here too
    a, b = self._broadcast(x)
    return a._reverse_order().maximum(b._reverse_order())._reverse_order()  # min(a, b) = r(max(r(a), r(b)))
  def _reverse_order(self) -> Tensor:  # r: -x for floats, ~x for ints (-INT_MIN overflows, ~x never does)
    return -self if dtypes.is_float(self.dtype) else ~self
  @composite
  def where(self, x, y) -> Tensor:
    """A Python scalar branch takes the other branch's dtype, as it would in x + 3; two scalars take their own."""
    if not isinstance(x, Tensor): x = y._const(x) if isinstance(y, Tensor) else Tensor(x, device=self.device)
    x, y = x._broadcast(y)  # the branches meet in one dtype
    cond, x, y = self.cast(dtypes.bool)._broadcast(x, y, promote=False)  # the condition stays bool
    return cond._like(cond.uop.alu(Ops.WHERE, x.uop, y.uop))
  def cast(self, dtype) -> Tensor: return self if self.dtype == dtype else self._like(self.uop.cast(dtypes.of(dtype)))
  def bitcast(self, dtype) -> Tensor:  # the same bits, read as another dtype of the same size
    dtype = dtypes.of(dtype)
    if dtype.itemsize != self.dtype.itemsize:
      raise TypeError(f"can't bitcast {self.dtype.name} to {dtype.name}: sizes differ")
    return self if dtype == self.dtype else self._like(self.uop.bitcast(dtype))

  def exp2(self) -> Tensor: return self._unary(Ops.EXP2)
  def log2(self) -> Tensor: return self._unary(Ops.LOG2)
  @via_float32
  def exp(self) -> Tensor:  # (the CPU's lowering finds this product and reduces x by ln 2 itself: _exp)
    return (self._float() * (1 / math.log(2))).exp2()
  @via_float32
  def log(self) -> Tensor: return self.log2() * math.log(2)
  def sqrt(self) -> Tensor: return self._unary(Ops.SQRT)
  def sin(self) -> Tensor: return self._unary(Ops.SIN)
  @via_float32
  def cos(self) -> Tensor: return 1 - 2 * (self._float() / 2).sin().square()  # (x + pi/2 would round a large x)
  @composite
  def relu(self) -> Tensor: return (self > 0).where(self, 0)  # tinygrad's: its gradient at 0 is 0 (maximum's is 1/2)
  @via_float32
  @composite
  def sigmoid(self) -> Tensor:  # from e^-|x| <= 1: no inf in the value or the gradient
    x = self._float()
    e = (self >= 0).where(-x, x).exp()  # (not -|x|: |x|'s gradient at 0 is 0)
    return (self >= 0).where(1 / (1 + e), e / (1 + e))
  @via_float32
  @composite
  def tanh(self) -> Tensor:  # -e / (2 + e) from e = e^-2|x| - 1 in (-1, 0]: no cancellation near 0
    def of(a:Tensor) -> Tensor:
      e = (-2 * a)._expm1()
      return -e / (2 + e)
    return self._odd(of)
  def abs(self) -> Tensor:
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    return self.maximum(-self) + 0  # (+0: max keeps the first of -0.0 and 0.0, and abs(-0.0) is 0.0)
  def square(self) -> Tensor: return self * self
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def log10(self) -> Tensor: return self.log2() * math.log10(2)
  @via_float32
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def _odd(self, f:Callable[[Tensor], Tensor]) -> Tensor:
    """f(|x|) with x's sign (-0.0's too), for an odd f: at 0 the slope is f's."""
    x = self._float()
    negative = x._sign_bit()
    r = f(negative.where(-x, x))
    return negative.where(-r, r)
  def _sign_bit(self) -> Tensor:  # set for -0.0 too: the float's bits as an int of its size are negative
    if not dtypes.is_float(self.dtype): return self < 0
    return self.bitcast({2: dtypes.short, 4: dtypes.int, 8: dtypes.long}[self.dtype.itemsize]) < 0
  @via_float32
  def atan(self) -> Tensor:
    """For |x| <= 1, twice halved (atan x = 2 atan(x / (1 + sqrt(1 + x^2)))) to |x| <= 0.2, then its odd series to
    x^15 (error below 2e-12); for |x| > 1, pi/2 - atan(1/x)."""
    def of(a:Tensor) -> Tensor:
      big = a > 1
      y = big.where(a.maximum(1).reciprocal(), a)  # (maximum: the side not taken divides by no 0)
      for _ in range(2): y = y / (1 + (1 + y * y).sqrt())
      series = y * sum(((-1) ** k / (2 * k + 1)) * (y * y) ** k for k in range(8)) * 4  # (* 4: the two halvings)
      return big.where(math.pi / 2 - series, series)
    return self._odd(of)
  @via_float32
  def asin(self) -> Tensor: return (self._float() / (1 - self._float().square()).sqrt()).atan()
  @via_float32
  def acos(self) -> Tensor: return math.pi / 2 - self.asin()
  # e^x - 1 and log(1 + x), written out, cancel near 0 (acosh's: near 1); there these use forms that don't. Elsewhere,
  # and outside the domain (where torch's gradient is still the derivative's formula), the written-out forms.
  def _near(self, low:float, high:float, near:Callable[[Tensor], Tensor], far:Callable[[Tensor], Tensor]) -> Tensor:
    """near(x) for x in [low, high), far(x) elsewhere. Where a side isn't used it is given a value from its own range,
    so that its gradient there is 0, not nan (a where's unused side still multiplies its zero by the side's slope)."""
    inside = (self >= low) & (self < high)
    return inside.where(near(inside.where(self, (low + high) / 2)), far(inside.where(high, self)))
  @via_float32
  def sinh(self) -> Tensor:  # below 1, (e + e / (e + 1)) / 2 for e = e^|x| - 1
    def near(a:Tensor) -> Tensor:
      e = a._expm1()
      return (e + e / (e + 1)) / 2
    def far(y:Tensor) -> Tensor:  # (e^y - e^-y) / 2, e^y as (e^(y/2))^2: finite as far as sinh is (89, not 88.7)
      e = (y / 2).exp()
      return e * (e * 0.5) - 0.5 * (-y).exp()  # (not 0.5 / e^2: past e = inf its slope is 0 * inf, nan)
    return self._odd(lambda a: a._near(0, 1, near, far))
  @via_float32
  def cosh(self) -> Tensor:  # (its slope, sinh x, keeps its precision near 0, where (e^x - e^-x) / 2 cancels)
    return 1 + 2 * (self._float() / 2).sinh().square()
  @via_float32
  def asinh(self) -> Tensor:  # below 2, log1p(x + x^2 / (1 + sqrt(x^2 + 1)))
    def near(b:Tensor) -> Tensor: return (b + b.square() / (1 + (b.square() + 1).sqrt()))._log1p()
    return self._odd(lambda a: a._near(0, 2, near, lambda b: b._arc(1)))
  @via_float32
  def acosh(self) -> Tensor:  # below 2, log1p(x - 1 + sqrt(x - 1) sqrt(x + 1)) (at 1, the slope inf, not 0 * inf)
    def far(a:Tensor) -> Tensor:  # log(x + sqrt(x^2 - 1))
      b = (a < 0).where(a, -2)  # below -1: the same nan and slope, without cancelling to log(0) (-2 where unused)
      return (a < 0).where(-(b - (b.square() - 1).sqrt()).log(), a._arc(-1))
    return self._float()._near(1, 2, lambda b: (b - 1 + (b - 1).sqrt() * (b + 1).sqrt())._log1p(), far)
  def _arc(self, c:int) -> Tensor:  # log(x + sqrt(x^2 + c)); past 1e18, log(2x): x^2 + c is x^2 there, and a
    # float32's x^2 overflows at 1.8e19
    return (self > 1e18).where(self.maximum(1e18).log() + math.log(2), (self + (self.square() + c).sqrt()).log())
  @via_float32
  def atanh(self) -> Tensor:  # below 1/2, (log1p(x) - log1p(-x)) / 2
    return self._odd(lambda a: a._near(0, 0.5, lambda b: (b._log1p() - (-b)._log1p()) / 2,
                                       lambda a: ((1 + a) / (1 - a)).log() / 2))
  def _expm1(self) -> Tensor:  # e^x - 1: below 1/2, its series to x^9 (x^17 for a double), error below 1e-9 (1e-18)
    terms = [1 / math.factorial(k + 1) for k in range(17 if self.dtype == dtypes.double else 9)]
    return self._float()._near(-0.5, 0.5, lambda b: b * b._horner(terms), lambda a: a.exp() - 1)
  def _log1p(self) -> Tensor:  # log(1 + x) = log(u) + (x - (u - 1)) / u for u = 1 + x rounded: what u lost, put back
    u = 1 + self                # (for x > -1 and finite)
    return u.log() + (self - (u - 1)) / u
  def _horner(self, coefficients:list[float]) -> Tensor:  # c0 + x (c1 + x (c2 + ...))
    return functools.reduce(lambda acc, c: acc * self + c, reversed(coefficients[:-1]), coefficients[-1])
  @via_float32
  def erf(self) -> Tensor:
    """Below 1/2, its series to x^13 (error below 1e-9); past it, 1 - erfc (below 3e-8)."""
    terms = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7)]
    return self._odd(lambda a: a._near(0, 0.5, lambda b: b * b.square()._horner(terms), lambda b: 1 - b._erfc()))
  def _erfc(self) -> Tensor:  # 1 - erf(x) for x >= 0, within 1.2e-7 of it relatively: Numerical Recipes' erfcc
    t = 1 / (1 + 0.5 * self)
    return t * (t._horner([-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
                           1.48851587, -0.82215223, 0.17087277]) - self.square()).exp()
  def sign(self) -> Tensor:  # (0 and nan: x*0, nan stays; an unsigned int is never below 0, and -1 isn't one)
    if self.dtype == dtypes.bool: return self  # (its own sign, as torch's)
    positive_or_not = (self > 0).where(1, self * 0)
    return positive_or_not if dtypes.is_unsigned(self.dtype) else (self < 0).where(-1, positive_or_not)
  def trunc(self) -> Tensor:  # a float past its fraction's bits is an integer already (and may not fit an int)
    if not dtypes.is_float(self.dtype): return self
    bits, whole = (52, dtypes.int64) if self.dtype == dtypes.double else (23, dtypes.int32)
    x = self.detach()
    out = (x.abs() < 2 ** bits).where(x.cast(whole).cast(x.dtype)._signed_zero(x), x)
    # its gradient is 0, as torch's: through this select, exactly (a multiply by 0 would make an infinite one nan)
    return (self != self).where(self, out)
  def _signed_zero(self, x:Tensor) -> Tensor:  # a 0 takes x's sign, as C's (a sign: no gradient flows to x)
    return (self == 0).where(x.detach() * 0, self)
  def floor(self) -> Tensor: return self._rounded(up=False)
  def ceil(self) -> Tensor: return self._rounded(up=True)
  def _rounded(self, up:bool) -> Tensor:  # trunc, one higher where that rounded down (ceil), or lower where up (floor)
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t < self).where(t + 1, t) if up else (t > self).where(t - 1, t)
  def round(self) -> Tensor:  # half to even, as numpy and torch
    if not dtypes.is_float(self.dtype): return self
    f = self.floor()
    odd = f - (f / 2).floor() * 2 != 0  # a tie rounds to the even one of f and f + 1
    up = (self - f > 0.5) | ((self - f == 0.5) & odd)
    return up.where(f + 1, f)._signed_zero(self)
  def clip(self, min_=None, max_=None) -> Tensor:  # (where, not maximum: at a bound the gradient is 1, as torch's)
    if min_ is None and max_ is None: raise RuntimeError("clip needs min_ or max_")
    x = self if min_ is None else (self < min_).where(min_, self)
    return x if max_ is None else (x > max_).where(max_, x)
  clamp = clip
  def lerp(self, end:Tensor, weight) -> Tensor:  # from the nearer end, as torch's: exact at weights 0 and 1
    a, b = (t._float() for t in self._broadcast(end))  # (ints: end - self would wrap)
    w = weight if isinstance(weight, Tensor) else a._const(weight)
    return (w < 0.5).where(a + (b - a) * w, b - (b - a) * (1 - w))
  def masked_fill(self, mask:Tensor, value) -> Tensor: return mask.where(value, self)
  def isnan(self) -> Tensor: return self != self
  def isinf(self, detect_positive=True, detect_negative=True) -> Tensor:
    return ((self == math.inf) & detect_positive) | ((self == -math.inf) & detect_negative)
  def isfinite(self) -> Tensor: return (self.isinf() | self.isnan()).logical_not()
  def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    other = self._const(other)
    if self.dtype == dtypes.bool: return self == other
    a, b = self._float(), other._float()  # (ints: a - b would wrap)
    near = self.isfinite() & other.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
    same_inf = (self.isinf() | other.isinf()) & (self == other)
    return near | same_inf | (self.isnan() & other.isnan() & equal_nan)
  def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:  # (0-d: bool() of it, or item())
    return self.isclose(other, rtol, atol, equal_nan).all()
  def copysign(self, other) -> Tensor:  # x's magnitude, other's sign: its sign bit, so -0.0 counts as negative
    a, b = self._broadcast(other)
    return b._sign_bit().where(-a.abs(), a.abs())
  def fmod(self, x) -> Tensor:  # C's remainder: exact, with the dividend's sign (a 16-bit float's, in float32)
    a, b = self._broadcast(x)
    wide = dtypes.float if a.dtype in dtypes.narrow else a.dtype
    return a._like(a.cast(wide).uop.alu(Ops.MOD, b.cast(wide).uop)).cast(a.dtype)
  def logaddexp(self, other) -> Tensor:  # max(a, b) + log1p(e^-|a - b|): no exp overflows, no log cancels
    a, b = (t._float() for t in self._broadcast(other))  # (ints: a - b would wrap)
    apart = (a == b).where(0, (a - b).abs())  # (two equal infinities are 0 apart, not nan)
    return a.maximum(b) + (-apart).exp()._log1p()
  def pow(self, x) -> Tensor:
    """A small int power by repeated multiplying (exact for ints, where 2^(x log2 |base|) would round); else
    2^(x log2 |base|), negative where the base is and the power is odd, nan for a finite negative base to a non-integer
    power, 1 for x^0, 1^y and (-1)^inf, as C's pow. That value is a POW node's, whose gradient is pow's own (torch's),
    not that of the ops that compute it (nan at a zero base)."""
    if self.dtype == dtypes.bool and (wider := self._const(x).dtype) != dtypes.bool:  # bools as numbers: True ** 2 is 1
      return self.cast(wider).pow(x)
    if self.dtype in dtypes.narrow:  # a 16-bit float's, in float32, rounded once (as torch's)
      return self.float().pow(x).cast(dtypes.promote(self.dtype, x.dtype) if isinstance(x, Tensor) else self.dtype)
    if isinstance(x, float) and x.is_integer() and 0 <= x <= 64 and dtypes.is_float(self.dtype): x = int(x)  # x ** 2.0
    if isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 64:  # (x^0: below, with pow's slope, 0)
      out, base = self.ones_like(), self
      for bit in reversed(bin(x)[2:]):  # the lowest first
        if bit == "1": out = out * base
        base = base * base
      return out
    if isinstance(x, int) and not dtypes.is_float(self.dtype):  # past 64: exact too, square and multiply
      if x < 0: raise DTypeError(f"an int tensor to a negative power ({x}) is a fraction: use a float tensor")
      e = Tensor(x, dtypes.uint64 if dtypes.is_unsigned(self.dtype) else None, self.device)  # (one that holds x)
      return self._int_pow(e).cast(self.dtype)  # (wider, wrapped back: the same bits)
    if isinstance(x, Tensor) and dtypes.is_int(dtypes.promote(self.dtype, x.dtype)): return self._int_pow(x)
    base, e = (t._float() for t in self._broadcast(x))  # (an int to a half power: half, as add)
    mag = (base.abs().log2() * e).exp2()
    whole = e == e.trunc()
    odd = (e / 2).trunc() * 2 != e
    # a negative base to a whole power: the magnitude, signed by the power; to any other, nan (-inf's: inf or 0, as C's)
    negative = whole.where(odd.where(-mag, mag), (base == -math.inf).where(mag, math.nan))
    negative_zero = base._sign_bit() & whole & odd  # -0.0 to an odd power keeps its sign (-0.0 ** -1: -inf)
    signed = (base < 0).where(negative, negative_zero.where(-mag, mag))
    one = (e == 0) | (base == 1) | ((base == -1) & e.isinf())  # as C's pow, where the log's product is nan
    value = one.where(1, signed)
    return value._like(UOp(Ops.POW, value.dtype, (base.uop, e.uop, value.uop)))
  def _int_pow(self, e:Tensor) -> Tensor:
    """An int to an int tensor's power, exact, as torch's: square and multiply over the exponent's bits, wrapping as
    the dtype's ints do. A negative power is 1 / b^-e rounded toward 0: 1 for b = 1, +-1 for b = -1, else 0."""
    b, e = self._broadcast(e)
    out, square = b.ones_like(), b
    for k in range(8 * e.dtype.itemsize - (not dtypes.is_unsigned(e.dtype))):  # every bit but a sign: see below
      out = ((e >> k) & 1).cast(dtypes.bool).where(out * square, out)
      square = square * square
    if dtypes.is_unsigned(b.dtype): return out  # (no negative power)
    negative = (b == 1).where(1, (b == -1).where((e & 1).cast(dtypes.bool).where(-1, 1), 0))
    return (e < 0).where(negative.cast(out.dtype), out)
  __pow__ = pow
  eq, ne, mod, lshift, rshift = __eq__, __ne__, __mod__, __lshift__, __rshift__
  bitwise_and, bitwise_or, bitwise_xor, bitwise_not = __and__, __or__, __xor__, __invert__
  # (the reflected operators, 2 - t, the in-place ones, t -= 2, and casts, t.half(), are tables after the class)

  # --- activations
  def relu6(self) -> Tensor: return (self > 6).where(6, self.relu())  # (not relu(x) - relu(x - 6): 1e8 gave 8)
  def hardtanh(self, min_val=-1, max_val=1) -> Tensor: return self.clip(min_val, max_val)
  def leaky_relu(self, neg_slope=0.01) -> Tensor: return (self < 0).where(self * neg_slope, self)
  def elu(self, alpha=1.0) -> Tensor: return self._positive_or(lambda x: alpha * x._expm1())
  def celu(self, alpha=1.0) -> Tensor: return self._positive_or(lambda x: alpha * (x / alpha)._expm1())
  def selu(self, alpha=1.67326, gamma=1.0507) -> Tensor:  # (at 0 the slope is gamma * alpha, as torch's)
    return gamma * self.elu(alpha)
  def _positive_or(self, f:Callable[[Tensor], Tensor]) -> Tensor:
    """x where x > 0, else f(x). f is given 0 where it isn't used: e^x of a big x would make its gradient nan there."""
    positive = self > 0
    return positive.where(self, f(positive.where(0, self)))
  @composite
  def silu(self) -> Tensor: return self * self.sigmoid()
  swish = silu
  @composite
  def gelu(self, approximate="tanh") -> Tensor:  # x P(X <= x) for a standard normal X; "tanh": its approximation
    if approximate not in ("none", "tanh"):
      raise RuntimeError(f"gelu's approximate is 'none' or 'tanh', not {approximate!r}")  # (torch's error)
    if approximate == "none":  # P(X <= x) = erfc(-x/sqrt 2) / 2: below 0, 1 + erf(x/sqrt 2) would cancel to nothing
      z = self * (1 / math.sqrt(2))
      return 0.5 * self * (self < 0).where(z.abs()._erfc(), 1 + z.erf())
    # (1 + tanh z) / 2 as sigmoid(2z): nothing cancels where tanh z nears -1
    return self * (2 * math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).sigmoid()
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  def softplus(self, beta=1.0) -> Tensor:  # log(1 + e^(bx)) / b, as max(bx, 0) + log(1 + e^-|bx|): no overflow
    x = self * beta
    # (maximum, not relu: at 0 its gradient splits, 1/2, and softplus's slope there is 1/2; relu's would give 0)
    return (x.maximum(0) + (-x.abs()).exp()._log1p()) / beta
  def mish(self) -> Tensor: return self * self.softplus().tanh()
  def softsign(self) -> Tensor: return self / (1 + self.abs())
  def hardsigmoid(self, alpha=1 / 6, beta=0.5) -> Tensor: return (alpha * self + beta).clip(0, 1)
  def hardswish(self) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def logsigmoid(self) -> Tensor: return -(-self).softplus()

  # --- reductions
  def _axes(self, axis) -> tuple[int, ...]:
    """The dims an op works along, sorted. A 0-d tensor takes axis 0 or -1, as in torch and tinygrad, and has none."""
    if axis is None: axes = range(self.ndim)
    else: axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    dims = [self._dim(a) for a in axes]
    if len(set(dims)) != len(dims): raise ShapeError(f"axis {axis} names a dim twice, for shape {self.shape}")
    return tuple(sorted(dims)) if self.ndim else ()
  def _dim(self, d:int, extra:int=0) -> int:
    n, d = self.ndim + extra, operator.index(d)
    if not -max(n, 1) <= d < max(n, 1):
      raise IndexError(f"dimension {d} is out of range for a tensor of shape {self.shape}")
    return d % n if n else 0
  def _reduce(self, op:Ops, axis, keepdim:bool) -> Tensor:
    axes = self._axes(axis)
    size, kept = prod(self.shape[i] for i in axes), tuple(s for i, s in enumerate(self.shape) if i not in axes)
    if size == 0: out = Tensor.full(kept, identity(op, self.dtype).arg, self.dtype, self.device)  # nothing to reduce
    else: out = self._reduce_axis(op, axes)
    ones_for_axes = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    return out._reshape(ones_for_axes if keepdim else kept)
  def _reduce_axis(self, op:Ops, axes:tuple[int, ...]) -> Tensor:
    return self._like(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), Reduction(op, axes)))
  def sum(self, axis=None, keepdim=False, dtype=None) -> Tensor: return self._accumulated(Ops.ADD, axis, keepdim, dtype)
  def prod(self, axis=None, keepdim=False, dtype=None) -> Tensor:
    return self._accumulated(Ops.MUL, axis, keepdim, dtype)
  def _accumulated(self, op:Ops, axis, keepdim:bool, dtype) -> Tensor:
    """Ints and bools in int64, as numpy and torch; 16-bit floats in float32, rounded back once, as torch."""
    if dtype is None and self.dtype in dtypes.narrow:
      return self.float()._accumulated(op, axis, keepdim, None).cast(self.dtype)
    return (self.cast(dtype) if dtype is not None else self._int64_if_smaller())._reduce(op, axis, keepdim)
  def max(self, axis=None, keepdim=False) -> Tensor: return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis=None, keepdim=False) -> Tensor: return self._reverse_order().max(axis, keepdim)._reverse_order()
  @via_float32  # (a 16-bit float's sum may pass 65504)
  @composite
  def mean(self, axis=None, keepdim=False) -> Tensor:
    count = prod(self.shape[i] for i in self._axes(axis))
    return self._float().sum(axis, keepdim) * (1 / count if count else math.nan)
  @composite
  def softmax(self, axis=-1, dtype=None) -> Tensor:  # (the max keeps exp from overflowing; its gradient cancels)
    e = self._shifted(axis, dtype).exp()
    return e / e.sum(axis, keepdim=True)
  @composite
  def log_softmax(self, axis=-1, dtype=None) -> Tensor:
    m = self._shifted(axis, dtype)
    return m - m.exp().sum(axis, keepdim=True).log()
  def _shifted(self, axis, dtype) -> Tensor:  # less its max, detached; in dtype, where one is given (tinygrad's)
    m = self._float() - self.max(axis, keepdim=True).detach()
    return m if dtype is None else m.cast(dtype)
  def softmin(self, axis=-1) -> Tensor: return (-self._float()).softmax(axis)
  @composite
  def logsumexp(self, axis=None, keepdim=False) -> Tensor:
    x = self._float()  # (ints: x - m would wrap)
    m = x.max(axis, keepdim=True).detach()
    m = m.isinf().where(0, m)  # a row of -inf is -inf, not nan
    total = (x - m).exp().sum(axis, keepdim)
    return total.log() + m.reshape(total.shape)
  def any(self, axis=None, keepdim=False) -> Tensor: return self.bool().max(axis, keepdim)
  def all(self, axis=None, keepdim=False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()
  @via_float32
  @composite
  def var(self, axis=None, keepdim=False, correction=1) -> Tensor:
    n, x = prod(self.shape[i] for i in self._axes(axis)), self._float()
    squares = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return squares.div(max(0, n - correction))
  def std(self, axis=None, keepdim=False, correction=1) -> Tensor: return self.var(axis, keepdim, correction).sqrt()
  def var_mean(self, axis=None, keepdim=False, correction=1) -> tuple[Tensor, Tensor]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis=None, keepdim=False, correction=1) -> tuple[Tensor, Tensor]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def normalize(self, p=2.0, dim=1, eps=1e-12) -> Tensor:  # divided by its p-norm along dim (p=0: how many aren't 0)
    if p == 0: norm = (self != 0).sum(dim, keepdim=True)
    elif math.isinf(p): norm = self.abs().max(dim, keepdim=True) if p > 0 else self.abs().min(dim, keepdim=True)
    else: norm = self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
    return self / norm.maximum(eps)
  def argmax(self, axis=None, keepdim=False) -> Tensor:  # the first of the largest
    if axis is None: return self.flatten().argmax(0).reshape((1,) * self.ndim if keepdim else ())
    if not self.ndim: return self.reshape(1).argmax(self._dim(axis)).reshape(())  # (a 0-d tensor's only place: 0)
    # stored first, then compared with its max: a C compiler fuses a*b+c where it likes, so x computed again in
    # another kernel than the max's could differ in the last bit, and match no element of it
    d, x = self._dim(axis), self.contiguous()
    n = self.shape[d]
    # n..1: the first max gets the largest number, and n minus it is its index
    countdown = Tensor.arange(n, 0, -1, device=self.device).reshape(n, *(1,) * (self.ndim - d - 1))
    return (n - (x._at_max(x.max(d, keepdim=True)) * countdown).max(d, keepdim)).cast(dtypes.int32)
  def argmin(self, axis=None, keepdim=False) -> Tensor: return self._reverse_order().argmax(axis, keepdim)
  def _at_max(self, top:Tensor) -> Tensor: return (self == top) | (self != self)  # (a nan is the max of what holds it)

  # --- scans and sorting: each output from a row and a square of comparisons, as a matmul is from a row and a column
  def _last(self, axis:int) -> tuple[Tensor, Callable[[Tensor], Tensor]]:  # axis moved last, and a way back
    d = self._dim(axis)
    return self.transpose(d, -1), lambda t: t.transpose(d, -1)
  def _scan(self, op:Ops, axis:int) -> Tensor:
    """Each element reduced with those before it along axis: a reduce of the row over a triangle. Past 16 elements, in
    blocks of 16: each block's scan, combined with the scan of the blocks' totals before it (about 16n work, not n^2;
    a 1M cumsum: 9x faster than blocks of 256)."""
    if not self.ndim:
      self._dim(axis)  # (checked: a 0-d tensor takes 0 or -1)
      return self
    if self.dtype in dtypes.narrow: return self.float()._scan(op, axis).cast(self.dtype)
    x, back = self._last(axis)
    fill = identity(op, self.dtype).arg
    n, block = x.shape[-1], 16
    if n <= block:
      upto = Tensor.ones(n, n, dtype=dtypes.bool, device=self.device).tril()  # [i, j]: j <= i, what output i reduces
      return back(upto.where(x.unsqueeze(-2), fill)._reduce(op, -1, False))
    # padded up to whole blocks (-n % block more), as (..., n/16, 16)
    blocks = x._pad_along(x.ndim - 1, 0, -n % block, fill).reshape(*x.shape[:-1], cdiv(n, block), block)
    within = blocks._scan(op, -1)
    # block b starts from the combined totals of blocks 0..b-1: the totals scanned, then shifted right one (a fill
    # padded before, the last cut after: a pad of -1); block 0 starts from the fill
    start = within[..., -1]._scan(op, -1)._pad_along(x.ndim - 1, 1, -1, fill)
    return back(within._alu(op, start.unsqueeze(-1)).flatten(-2)[..., :n])
  def _int64_if_smaller(self) -> Tensor:  # a smaller int or a bool as int64 (a uint64 stays one)
    smaller = (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool) and self.dtype.itemsize < 8
    return self.cast(dtypes.int64) if smaller else self
  @composite
  def cumsum(self, axis=0) -> Tensor: return self._int64_if_smaller()._scan(Ops.ADD, axis)
  @composite
  def cumprod(self, axis=0) -> Tensor: return self._int64_if_smaller()._scan(Ops.MUL, axis)
  def cummax(self, axis=0) -> tuple[Tensor, Tensor]:
    """The running max, and where it was last met, as torch's."""
    if not self.ndim: return self._scan(Ops.MAX, axis), Tensor(0, dtypes.int32, self.device)
    stored = self.contiguous()  # (compared with its running max: see argmax)
    values = stored._scan(Ops.MAX, axis)
    x, back = stored._last(axis)
    v, _ = values._last(axis)
    steps = Tensor.arange(x.shape[-1], device=self.device)
    met = x.unsqueeze(-2)._at_max(v.unsqueeze(-1)) & (steps <= steps.unsqueeze(-1))  # [i, j]: x_j is the max up to i
    return values, back(met.where(steps, -1).max(-1).cast(dtypes.int32))
  def cummin(self, axis=0) -> tuple[Tensor, Tensor]:
    values, where = self._reverse_order().cummax(axis)
    return values._reverse_order(), where
  def logcumsumexp(self, axis=0) -> Tensor:
    if not self.ndim: return self._scan(Ops.ADD, axis)
    x, back = self._float()._last(axis)
    m = x.cummax(-1)[0].detach().unsqueeze(-1)  # each output's running max: no exp overflows, none underflows to 0
    m = m.isinf().where(0, m)  # (an infinite one would be inf - inf: nan)
    tri = Tensor.ones(x.shape[-1], x.shape[-1], dtype=dtypes.bool, device=self.device).tril()
    return back(tri.where(x.unsqueeze(-2) - m, -math.inf).exp().sum(-1).log() + m.squeeze(-1))
  def sort(self, dim=-1, descending=False) -> tuple[Tensor, Tensor]:
    """Sorted values and where they were: each element's place is how many come before it (equal ones in their order:
    a stable sort), and each place takes the element whose place it is. Comparisons of every pair: n^2 work."""
    if not self.ndim: return self, Tensor(0, dtypes.int32, self.device)
    x, back = self.contiguous()._last(dim)  # (stored: its values are the ones compared and placed, see argmax)
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # a: [i, 1], b: [1, j]
    steps = Tensor.arange(x.shape[-1], device=self.device)
    def below(p, q): return (p < q) | ((p == p) & (q != q))  # a nan above every number, as torch sorts
    same = (b == a) | ((a != a) & (b != b))  # (nan equals nan here)
    before = below(a, b) if descending else below(b, a)  # [i, j]: x_j goes before x_i
    place = (before | (same & (steps < steps.unsqueeze(-1)))).sum(-1)  # (of equal ones, j < i first: a stable sort)
    goes_to = place._one_hot(x.shape[-1])  # [i, p]: element i goes to place p
    return (back(goes_to.where(a, 0).sum(-2).cast(self.dtype)),
            back(goes_to.where(steps.unsqueeze(-1), 0).sum(-2).cast(dtypes.int32)))
  def argsort(self, dim=-1, descending=False) -> Tensor: return self.sort(dim, descending)[1]
  # (sorted_ is in tinygrad's signature: the result here is always sorted)
  def topk(self, k:int, dim=-1, largest=True, sorted_=True) -> tuple[Tensor, Tensor]:
    d = self._dim(dim)
    if not self.ndim: return tuple(t.reshape(()) for t in self.reshape(1).topk(max(k, 1), d, largest))  # (as torch's)
    if not 0 <= k <= self.shape[d]: raise ValueError(f"topk's k={k} is out of range for dim {d} of shape {self.shape}")
    values, where = self.sort(d, descending=largest)
    return values._along(d, 0, k), where._along(d, 0, k)

  # --- movement: each one a view change, no data moves
  def _view(self, *moves:tuple[str, Any]) -> Tensor: return self._viewing(self.uop.moved(*moves))
  def _viewing(self, uop:UOp) -> Tensor:
    """A view of this tensor. It notes its owner (this tensor's owner while that lives, else this tensor), so that a
    write through it is a write into the owner: not into another tensor sharing its buffer by an equal graph (see
    _realize_readers), nor into a copy where the owner had no buffer when the view was taken (see _graph_owner)."""
    view = self._like(uop)
    if (owner := self._owner()) is None: owner = self
    view.owner_ref = weakref.ref(owner)
    if uop.src[0].op not in (Ops.BUFFER, Ops.ASSIGN): owner.graph_viewed = True
    return view
  def _owner(self) -> Tensor|None: return None if self.owner_ref is None else self.owner_ref()
  def reshape(self, *shape) -> Tensor:
    shape = [self.shape[i] if s is None else s for i, s in enumerate(unpacked(shape))]
    if shape.count(-1) > 1: raise ShapeError(f"reshape to {tuple(shape)}: only one dimension can be -1")
    if -1 in shape:
      rest = prod(s for s in shape if s != -1)
      if not rest: raise ShapeError(f"reshape of {self.shape} to {tuple(shape)}: -1 could be any size beside a 0")
      shape[shape.index(-1)] = self.numel() // rest
    shape = check_shape(shape)  # checked first: a size like 2.5 would never fold into strides
    if prod(shape) != self.numel(): raise ShapeError(f"can't reshape a tensor of shape {self.shape} to {shape}")
    return self._reshape(shape)
  def _reshape(self, shape:tuple[int, ...]) -> Tensor:  # to a shape of as many elements
    return self if shape == self.shape else self._view(("reshape", shape))
  def permute(self, *order) -> Tensor:
    order = tuple(self._dim(d) for d in unpacked(order))
    if sorted(order) != list(range(self.ndim)): raise ShapeError(f"permute {order} is not an order of {self.ndim} dims")
    return self._view(("permute", order))
  def expand(self, *shape) -> Tensor:
    shape = unpacked(shape)
    shape = check_shape(tuple(o if s is None or s == -1 else s  # (None, as -1: the size it has)
                              for s, o in zip(shape, (1,) * (len(shape) - self.ndim) + self.shape)))
    if broadcast_shape(self.shape, shape) != shape: raise ShapeError(f"can't expand {self.shape} to {shape}")
    return self._expand(shape)
  def _expand(self, shape:tuple[int, ...]) -> Tensor:  # to a shape it broadcasts to: dims of 1 in front, then expanded
    ones = (1,) * (len(shape) - self.ndim) + self.shape
    moves = []
    if ones != self.shape: moves.append(("reshape", ones))
    if shape != ones: moves.append(("expand", shape))
    return self._view(*moves) if moves else self
  def pad(self, padding, mode:str="constant", value=0.0) -> Tensor:
    """padding is flat, in torch's order (the last dim's before and after, then the dim before it's, ...), or one
    (before, after) pair or None per dim; a negative amount crops. Past the edges, "constant" holds value, "reflect"
    mirrors the values inside the edge, "replicate" repeats the edge and "circular" wraps around."""
    if not any(p is None or isinstance(p, (tuple, list)) for p in padding): padding = flat_pairs(padding, self.ndim)
    padding = tuple((0, 0) if p is None else tuple(p) for p in padding)
    if len(padding) != self.ndim: raise ShapeError(f"padding {padding} doesn't match shape {self.shape}")
    if not all(len(p) == 2 and all(isinstance(a, numbers.Integral) for a in p) for p in padding):
      raise ShapeError(f"padding {padding}: each dim takes a (before, after) pair of ints")
    padding = tuple((int(b), int(a)) for b, a in padding)
    if mode != "constant":
      if mode not in EDGE_PADS:  # (tinygrad's error type)
        raise NotImplementedError(f"pad mode {mode!r} is not one of constant, {', '.join(EDGE_PADS)}")
      if value != 0: raise ValueError(f"pad mode {mode!r} takes no value: only constant does")
    check_shape(tuple(s + b + a for s, (b, a) in zip(self.shape, padding)))
    def cropped(t:Tensor) -> Tensor:
      return t.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(padding, t.shape)))
    grow = tuple((max(b, 0), max(a, 0)) for b, a in padding)
    if mode == "circular": return cropped(self)._pad_edges(grow, mode)  # it wraps what the crop leaves, as torch's
    if mode in EDGE_PADS: return cropped(self._pad_edges(grow, mode))
    x = self._view(("pad", grow))
    if value != 0 or math.copysign(1, value) < 0:  # (a view pads with 0.0: -0.0 too is a value of its own)
      x = self.ones_like(dtypes.bool).pad(grow).where(x, value)
    return cropped(x)
  def _pad_edges(self, grow, mode:str) -> Tensor:
    """One dim at a time: cat what goes before, the tensor, and what goes after, each a view of the tensor."""
    pad, x = EDGE_PADS[mode], self
    for d, ((b, a), s) in enumerate(zip(grow, self.shape)):
      if b == a == 0: continue
      if max(b, a) > pad.widest(s):
        raise ShapeError(f"{mode} pad ({b}, {a}) of dim {d}: size {s} allows {pad.widest(s)} a side")
      before, after = pad.pieces(x, d, s, b, a)
      x = Tensor.cat(*[t for t in (before, x, after) if t.shape[d]], dim=d)
    return x
  def shrink(self, arg) -> Tensor:
    if len(arg) != self.ndim: raise ShapeError(f"shrink {arg} doesn't match shape {self.shape}")
    arg = tuple((0, s) if a is None else tuple(a) for a, s in zip(arg, self.shape))
    if any(not 0 <= b <= e <= s for (b, e), s in zip(arg, self.shape)):
      raise ShapeError(f"shrink {arg} is out of bounds for shape {self.shape}")
    check_shape(tuple(e - b for b, e in arg))  # (so each is an int: their differences are)
    arg = tuple((int(b), int(e)) for b, e in arg)
    return self if all(a == (0, s) for a, s in zip(arg, self.shape)) else self._view(("shrink", arg))
  def _along(self, d:int, lo:int, hi:int) -> Tensor:  # elements lo to hi-1 of dim d
    return self.shrink(tuple((lo, hi) if i == d else None for i in range(self.ndim)))
  def _pad_along(self, d:int, before:int, after:int, value=0.0) -> Tensor:  # dim d padded
    return self.pad(tuple((before, after) if i == d else None for i in range(self.ndim)), value=value)
  def flip(self, axis, *more) -> Tensor: return self._view(("flip", self._axes((axis, *more) if more else axis)))
  def transpose(self, dim0=1, dim1=0) -> Tensor:
    order = list(range(self.ndim))
    a, b = self._dim(dim0), self._dim(dim1)
    if not self.ndim: return self  # (its dims 0 and -1 are none)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  @property
  def T(self) -> Tensor: return self.transpose() if self.ndim > 1 else self  # (dims 0 and 1 swapped, as tinygrad's)
  def squeeze(self, dim=None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = self._dim(dim)
    return self if not self.ndim or self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d+1:])
  def unsqueeze(self, dim:int) -> Tensor:
    d = self._dim(dim, extra=1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def flatten(self, start_dim=0, end_dim=-1) -> Tensor:
    s, e = self._dim(start_dim), self._dim(end_dim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e+1]),) + self.shape[e+1:])
  def _stride(self, dim:int, step:int) -> Tensor:
    """Every step-th element along dim: pad to a multiple of step, split the dim in two, keep the first column."""
    n = self.shape[dim]
    x = self._pad_along(dim, 0, -n % step).unflatten(dim, (cdiv(n, step), step))
    return x._along(dim + 1, 0, 1).squeeze(dim + 1)
  def __getitem__(self, idx) -> Tensor:
    """numpy's indexing: ints, slices, None and ... are views; int tensors (or lists) pick elements (see _pick), and a
    bool tensor picks those where it is True (the int tensors of its True places, read back to the host: the result's
    shape depends on the data)."""
    x, dims, idxs = self._viewed(idx)
    return x._pick(dims, idxs) if dims else x
  def _viewed(self, idx) -> tuple[Tensor, list[int], list[Tensor]]:
    """x[idx] as the view its ints, slices, None and ... take (ints squeezed), and int tensors picking in it."""
    if isinstance(idx, list) and any(isinstance(i, (slice, Tensor)) or i is None or i is Ellipsis for i in idx):
      idx = tuple(idx)  # (a list of slices or tensors is a tuple of them, as numpy's old rule and torch's)
    idx = [Tensor(i, device=self.device) if isinstance(i, (list, tuple)) else
           int(i) if isinstance(i, numbers.Integral) and not isinstance(i, bool) else i  # (numpy's ints too)
           for i in (idx if isinstance(idx, tuple) else (idx,))]
    ellipses = [k for k, i in enumerate(idx) if i is Ellipsis]
    if len(ellipses) > 1: raise IndexError("an index can have only a single ellipsis")
    def mask(i) -> bool: return isinstance(i, Tensor) and i.dtype == dtypes.bool
    used = sum(i.ndim if mask(i) else 1 for i in idx if i is not None and i is not Ellipsis)
    if used > self.ndim: raise IndexError(f"too many indices ({used}) for a tensor of shape {self.shape}")
    at = ellipses[0] if ellipses else len(idx)
    idx[at:at+1] = [slice(None)] * (self.ndim - used)  # (the dims ... stands for, or those after the last)
    x, dim, squeeze, picks = self, 0, [], []
    for i in idx:
      width = i.ndim if mask(i) else 1  # the dims it covers
      if i is None: x = x.unsqueeze(dim)
      elif mask(i) and not i.ndim:  # a new dim, picked once where it is True, never where False: an index (numpy's)
        x, width = x.unsqueeze(dim), 1
        picks.append((dim, Tensor([0] * int(i.item()), dtypes.int32, self.device)))
      elif mask(i):  # picked where it is True
        if i.shape != x.shape[dim:dim + width]:
          raise IndexError(f"a bool index of shape {i.shape} for dims of {x.shape[dim:dim + width]}")
        places = i.nonzero()
        picks += [(dim + k, places[:, k]) for k in range(width)]
      elif isinstance(i, Tensor): picks.append((dim, i))
      elif isinstance(i, bool) or not isinstance(i, (int, slice)): raise IndexError(f"can't index a tensor with {i!r}")
      else:
        n = x.shape[dim]
        if isinstance(i, int):
          if not -n <= i < n: raise IndexError(f"index {i} is out of bounds for dim {dim} of size {n}")
          i = slice(i % n, i % n + 1)
          squeeze.append(dim)
        start, stop, step = i.indices(n)
        count = len(range(start, stop, step))
        if step < 0: x, start, step = x.flip(dim), n - 1 - start, -step  # the same elements, up the flipped dim
        window = (start, start + (count - 1) * step + 1) if count else (0, 0)
        x = x._along(dim, *window)
        if step > 1: x = x._stride(dim, step)
      dim += width
    if squeeze: x = x.reshape(tuple(s for d, s in enumerate(x.shape) if d not in squeeze))
    # (each pick's dim less the int-indexed dims before it, squeezed above)
    return x, [d - sum(1 for q in squeeze if q < d) for d, _ in picks], [i for _, i in picks]
  def _pick(self, dims:list[int], idxs:list[Tensor]) -> Tensor:
    """x[..., i, ..., j, ...] for int tensors i, j at dims: the tensors broadcast to one shape, which takes the dims'
    place if they are side by side, else goes first (numpy's rule). Each index (negative ones from the end) is compared
    with every position along its dim, and the one it equals picks the element: an index out of range picks none: 0."""
    hit, rest, order = self._hits(dims, idxs)
    x = self.permute(*rest, *dims)
    x = x.reshape(*x.shape[:len(rest)], *(1,) * (hit.ndim - self.ndim), *x.shape[len(rest):])  # (1s for the index)
    return hit.where(x, 0).sum(tuple(range(-len(dims), 0))).cast(self.dtype).permute(order)  # (summed over the sizes)
  def _put(self, dims:list[int], idxs:list[Tensor], v:Tensor) -> tuple[Tensor, Tensor]:
    """_pick backwards: v (broadcast to what x[...] picks) put where it picks, and where that is (the last of v's
    elements put on one place is the one it keeps, as numpy's)."""
    hit, rest, order = self._hits(dims, idxs)
    r, b = len(rest), hit.ndim - self.ndim  # (the index's dims, between rest and the picked dims)
    v = v.expand(tuple((*[self.shape[d] for d in rest], *hit.shape[r:r + b])[o] for o in order)).permute(argsort(order))
    written, v = hit._last_hit(v.reshape(*v.shape, *(1,) * len(dims)), tuple(range(r, r + b)))  # (*rest, *index, *1s)
    back = argsort([*rest, *dims])  # (x's dims from rest's and dims' order)
    return tuple(t.reshape(*t.shape[:r], *t.shape[r + b:]).permute(back).expand(self.shape) for t in (written, v))
  def _last_hit(self, values:Tensor, axes:tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Where this bool tensor is True along axes, and the value at the last place it is (in C order): a running count
    would store a value per place and hit, this compares each place's number with the last's."""
    at = Tensor.arange(prod(self.shape[a] for a in axes), device=self.device)
    at = at.reshape([s if a in axes else 1 for a, s in enumerate(self.shape)])
    last = self.where(at, -1).max(axes, keepdim=True)
    return last >= 0, (at == last).where(values, 0).sum(axes, keepdim=True)
  def _hits(self, dims:list[int], idxs:list[Tensor]) -> tuple[Tensor, list[int], list[int]]:
    """The indices of _pick compared with the places along their dims, laid out over (*rest, *index, *sizes) (the
    other dims, the indices' broadcast shape, the sizes of their dims: 1 where it doesn't vary); the other dims; and
    the order of the dims of a pick, from (*rest, *index) to numpy's."""
    for i in idxs:
      if not dtypes.is_int(i.dtype): raise IndexError(f"a tensor index must be of ints or bools, not {i.dtype.name}")
    idxs = [i.cast(dtypes.int64) if i.dtype == dtypes.uint64 else i for i in idxs]  # (no int holds it and arange's)
    try: shape = broadcast_shape(*[i.shape for i in idxs])
    except ShapeError as e: raise IndexError(f"index tensors: {e}") from None  # (numpy's and torch's error)
    rest = [d for d in range(self.ndim) if d not in dims]
    sizes, ones_for_rest = [self.shape[d] for d in dims], (1,) * (self.ndim - len(dims))
    hit = None
    for k, (i, n) in enumerate(zip(idxs, sizes)):
      index = (i < 0).where(i + n, i)._expand(shape).reshape(*ones_for_rest, *shape, *(1,) * len(sizes))
      places = Tensor.arange(n, device=self.device).reshape(*ones_for_rest, *(1,) * len(shape),
                                                            *[n if j == k else 1 for j in range(len(sizes))])
      hit = index == places if hit is None else hit & (index == places)
    side_by_side = dims == list(range(dims[0], dims[0] + len(dims)))  # the picked shape takes their place, else first
    r, b = len(rest), len(shape)
    first = dims[0] if side_by_side else 0
    # a pick is (*rest, *shape) before: shape's b dims go after the first `first` dims of rest
    return hit, rest, [*range(first), *range(r, r + b), *range(first, r)]
  def __setitem__(self, idx, value):
    """x[idx] = v writes v (broadcast) where x[idx] reads, as an assign: in place, lazily. v is put where the index's
    int tensors pick (_put), then moved back through its views (as a gradient is) with a mask of where it goes. The
    index is taken of a stand-in for x: a view of x would be a reader, which the write would realize first."""
    if not isinstance(value, (Tensor, numbers.Number)): value = Tensor(value, self.dtype, self.device)
    v = self._const(value).cast(self.dtype)
    if isinstance(idx, Tensor) and idx.dtype == dtypes.bool and idx.ndim: return self.assign(self._masked(idx, v))
    view, dims, idxs = self._stand_in(Placeholder("setitem", 0))._viewed(idx)
    # x[idx] += v: Python then calls x.__setitem__(idx, x[idx]) with the view just written in place, an identity
    same = v.uop.op is Ops.VIEW and v.uop.src[0] is self.uop and v.uop.arg.views == view.uop.arg.views
    if not dims and same and not v.uop.arg.detached: return  # (not a detached view: that cuts gradients)
    if dims: written, v = view._put(dims, idxs, v)
    else: written, v = view.ones_like(dtypes.bool), v.expand(view.shape)
    self.assign(_moved_back(written, view.uop).where(_moved_back(v, view.uop), self))
  def __delitem__(self, idx): raise TypeError("a tensor's elements can't be deleted")  # (not an AttributeError)
  def _masked(self, mask:Tensor, v:Tensor) -> Tensor:
    """x[mask] = v's value, with no pick: v's k-th element (along the dim the True places make) goes to the k-th True
    place, read by its count of True places so far; where v has no such dim, each True place takes all of it."""
    if mask.shape != self.shape[:mask.ndim]:
      raise IndexError(f"a bool index of shape {mask.shape} for dims of {self.shape[:mask.ndim]}")
    rest = self.shape[mask.ndim:]
    if v.ndim == len(rest) + 1 and v.shape[0] == 1: v = v.reshape(v.shape[1:])  # (one value for every place)
    if v.ndim > len(rest):  # (read: how many places there are)
      v = v.expand(int(mask.sum().item()), *rest)[(mask.flatten().cumsum() - 1).maximum(0)].reshape(self.shape)
    return mask.reshape(*mask.shape, *(1,) * len(rest)).where(v, self)
  def _stand_in(self, arg:Placeholder) -> Tensor:  # of this one's shape, dtype and device: a whole view of no buffer
    return Tensor._of(_unheld(self.dtype, ShapeTracker.contiguous(self.shape), arg), self.device)
  def _index_dim(self, op:str, dim:int, index:Tensor) -> int:  # gather's or scatter's dim, the index's shape checked
    d = self._dim(dim)
    if not dtypes.is_int(index.dtype): raise DTypeError(f"{op}'s index must be of ints, not {index.dtype.name}")
    if index.ndim != self.ndim or any(i > s for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d):
      raise ShapeError(f"{op}'s index of shape {index.shape} doesn't fit shape {self.shape} off dim {d}")
    return d
  def gather(self, dim:int, index:Tensor) -> Tensor:
    """out[i][j] = x[i][index[i][j]] (dim 1): each index compared with every place along dim, as _pick."""
    d = self._index_dim("gather", dim, index)
    if not self.ndim: return self.reshape(1).gather(0, index.reshape(1)).reshape(())
    x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
    along = x.unsqueeze(-1).transpose(d, -1)  # [.., 1 at d, .., n]: against the one-hot's [.., j at d, .., n]
    return index._one_hot(self.shape[d]).where(along, 0).sum(-1).cast(self.dtype)
  def _scattered(self, dim:int, index:Tensor, src:Tensor) -> tuple[Tensor, Tensor]:
    """Where each of src's elements goes, and the elements: (*x.shape, k) for the k indices along dim."""
    d = self._index_dim("scatter", dim, index)
    if any(i > s for i, s in zip(index.shape, src.shape)):
      raise ShapeError(f"scatter's index of shape {index.shape} doesn't fit src's shape {src.shape}")
    if src.dtype != self.dtype:
      raise DTypeError(f"scatter of {src.dtype.name} into {self.dtype.name}: dtypes must match")
    # laid out as (*x.shape, k): x's dims (at d, its n places), then the k indices along d
    hit = index._one_hot(self.shape[d]).transpose(d, -1)  # index's shape, n at d, index's dim d last
    values = src.shrink(tuple((0, i) for i in index.shape)).unsqueeze(-1).transpose(d, -1)  # 1 at d, src's dim d last
    grow = tuple((0, 0 if k == d else s - i) for k, (i, s) in enumerate(zip(index.shape, self.shape))) + ((0, 0),)
    return hit.pad(grow), values.pad(grow)  # (places no index reaches: never hit)
  def scatter(self, dim:int, index:Tensor, src, reduce:str|None=None) -> Tensor:
    if reduce not in (None, "add", "multiply"):
      raise TypeError(f"scatter's reduce is None, 'add' or 'multiply', not {reduce!r}")
    if isinstance(src, Tensor) and reduce: raise DTypeError("scatter's reduce takes a scalar src: use scatter_reduce")
    if not isinstance(src, Tensor): src = Tensor.full(index.shape, src, self.dtype, self.device)
    if reduce: return self.scatter_reduce(dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])
    written, value = Tensor._last_hit(*self._scattered(dim, index, src), (self.ndim,))  # (torch's: the last write)
    return written.squeeze(-1).where(value.squeeze(-1).cast(self.dtype), self)
  def scatter_reduce(self, dim:int, index:Tensor, src:Tensor, reduce:str, include_self=True) -> Tensor:
    fill = {"sum": 0, "mean": 0, "prod": 1, "amax": dtypes.min(self.dtype), "amin": dtypes.max(self.dtype)}
    if reduce not in fill: raise RuntimeError(f"scatter_reduce's reduce is one of {', '.join(fill)}, not {reduce!r}")
    hit, vals = self._scattered(dim, index, src)
    own = self if include_self else hit.any(-1).where(fill[reduce], self)
    picked = hit.where(vals, fill[reduce])
    if reduce == "mean":  # (of ints, rounded down, as torch's)
      count = hit.sum(-1) + (1 if include_self else hit.any(-1).logical_not())  # (a place no index hits: self / 1)
      rounding = None if dtypes.is_float(self.dtype) else "floor"
      return (picked.sum(-1) + own).div(count, rounding_mode=rounding).cast(self.dtype)
    combine = {"sum": lambda: picked.sum(-1) + own, "prod": lambda: picked.prod(-1) * own,
               "amax": lambda: picked.max(-1).maximum(own), "amin": lambda: picked.min(-1).minimum(own)}
    return combine[reduce]().cast(self.dtype)
  def masked_select(self, mask:Tensor, size:int|None=None, fill_value=0) -> Tensor:
    """The elements where mask (broadcast) is True, in order; size: that many, cut or filled with fill_value."""
    if mask.dtype != dtypes.bool: raise DTypeError(f"masked_select needs a bool mask, got {mask.dtype.name}")
    shape = broadcast_shape(self.shape, mask.shape)
    picked = self._expand(shape)[mask._expand(shape)]
    return picked if size is None else picked[:size].pad((0, max(0, size - picked.shape[0])), value=fill_value)
  def nonzero(self, size:int|None=None, fill_value=0) -> Tensor:
    """The indices of the nonzero elements, a row each, read back: their count is the data's (size: cut or filled)."""
    hits = [k for k, v in enumerate(self.flatten().tolist()) if v][:size]  # (each one's place in the flat order)
    strides = [prod(self.shape[d + 1:]) for d in range(self.ndim)]  # (row-major: a size-1 dim's too)
    rows = Tensor(hits, dtypes.int32, self.device).reshape(-1, 1) // Tensor(strides, dtypes.int32, self.device)
    rows = rows % Tensor(list(self.shape), dtypes.int32, self.device)
    return rows if size is None else rows.pad(((0, size - len(hits)), None), value=int(fill_value))  # (stays int)
  def to(self, device:str) -> Tensor:  # a copy on another device (this tensor where it is there)
    if Device.canonical(device) == self.device: return self
    out = Tensor.empty(*self.shape, dtype=self.dtype, device=device)
    out.buffer().copyin(self.buffer().copyout())
    if reading_trainable([self.uop]): note_computed_from(out.uop, self.uop, self.device)  # (gradients flow back)
    return out
  def to_(self, device:str) -> Tensor:
    self.uop, self.device = self.to(device).uop, Device.canonical(device)
    return self
  def replace(self, x:Tensor) -> Tensor:
    """This tensor now stands for x's value (in place, unlike UOp.replace): a copy of it where x holds a buffer, so
    that a write into one doesn't reach the other (as tinygrad's)."""
    if x.shape != self.shape: raise ShapeError(f"can't replace a tensor of shape {self.shape} by one of {x.shape}")
    if writes := [t for t in (self, x) if t.uop.op is Ops.ASSIGN]: Tensor.realize(*writes)  # (as they were ordered)
    self.uop, self.device = (x.clone() if _whole_view_of(x.uop) is not None else x).uop, x.device
    return self
  def cat(self, *others, dim=0) -> Tensor:
    ts, d = [self, *others], self._dim(dim)
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ShapeError(f"can't cat shapes {' and '.join(str(t.shape) for t in ts)} along dim {d}")
    dtype, total = dtypes.promote(*[t.dtype for t in ts]), sum(t.shape[d] for t in ts)
    out, at = None, 0
    for t in ts:  # each part where it goes, the rest kept (not added to a padded 0: -0.0 + 0.0 would lose its sign)
      after = total - at - t.shape[d]
      inside = t.ones_like(dtypes.bool)._pad_along(d, at, after)
      part = t.cast(dtype)._pad_along(d, at, after)
      out = part if out is None else inside.where(part, out)
      at += t.shape[d]
    return out
  def stack(self, *others, dim=0) -> Tensor:  # (Tensor.stack(a, b) and Tensor.stack([a, b]) too)
    ts = unpacked((self, *others))
    if not all(isinstance(t, Tensor) for t in ts): raise ValueError("stack takes tensors, or one list of them")
    d = ts[0]._dim(dim, extra=1)
    return ts[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in ts[1:]], dim=d)
  def view(self, *shape) -> Tensor: return self.reshape(*shape)
  def unflatten(self, dim:int, sizes) -> Tensor:
    d, known = self._dim(dim), prod(s for s in sizes if s != -1)
    sizes = tuple(self.shape[d] // known if s == -1 and known else s for s in sizes)  # (-1: from dim d's size alone)
    return self.reshape(self.shape[:d] + sizes + self.shape[d+1:])
  def split(self, sizes, dim=0) -> tuple[Tensor, ...]:  # pieces of sizes[i] along dim
    d = self._dim(dim)
    n = self.shape[d]
    if isinstance(sizes, numbers.Integral):  # pieces of that size, the last what is left (a dim of 0: one empty piece)
      sizes = [min(sizes, n - i) for i in range(0, n, max(sizes, 1))] or [0]
    if sum(sizes) != n: raise ShapeError(f"split sizes {list(sizes)} don't add up to {n}, dim {d}'s size")
    return tuple(self._along(d, e - s, e) for s, e in zip(sizes, itertools.accumulate(sizes)))
  def chunk(self, chunks:int, dim=0) -> list[Tensor]:
    if chunks < 1: raise ValueError(f"chunk needs chunks >= 1, got {chunks}")
    n = self.shape[self._dim(dim)]
    return list(self.split(cdiv(n, chunks) if n else [0] * chunks, dim))
  def repeat(self, *repeats) -> Tensor:  # the whole tensor tiled repeats[i] times along dim i
    repeats = unpacked(repeats)
    if len(repeats) < self.ndim: raise ShapeError(f"repeat {repeats} has fewer dims than shape {self.shape}")
    shape = (1,) * (len(repeats) - self.ndim) + self.shape
    x = self.reshape([v for s in shape for v in (1, s)]).expand([v for r, s in zip(repeats, shape) for v in (r, s)])
    return x.reshape([r * s for r, s in zip(repeats, shape)])
  def repeat_interleave(self, repeats:int, dim=None) -> Tensor:  # each element repeats times in a row
    if repeats < 0: raise ValueError(f"repeat_interleave needs repeats >= 0, got {repeats}")
    x, d = (self.flatten(), 0) if dim is None else (self, self._dim(dim))
    return x.unsqueeze(d + 1).expand(*x.shape[:d+1], repeats, *x.shape[d+1:]).flatten(d, d + 1)
  def roll(self, shifts, dims=None) -> Tensor:
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    shifts, dims = [v if isinstance(v, (tuple, list)) else (v,) for v in (shifts, dims)]
    if len(shifts) != len(dims): raise ShapeError(f"roll has {len(shifts)} shifts for {len(dims)} dims")
    x = self
    for shift, dim in zip(shifts, dims):
      d = self._dim(dim)
      if (n := x.shape[d]) == 0: continue
      cut = n - shift % n  # the last shift % n elements move to the front
      x = x._along(d, cut, n).cat(x._along(d, 0, cut), dim=d)
    return x
  def unfold(self, dim:int, size:int, step:int) -> Tensor:  # dim becomes its windows of size, step apart; size last
    d = self._dim(dim)
    if size < 0 or step <= 0 or size > self.shape[d]:
      raise ShapeError(f"unfold of dim {d} (size {self.shape[d]}) needs 0 <= size <= it and step > 0: "
                       f"size={size}, step={step}")
    return self.transpose(d, -1)._pool((size,), step).transpose(d, -2)  # windows back at d, before size
  def diagonal(self, offset=0, dim1=0, dim2=1) -> Tensor:
    d1, d2 = self._dim(dim1), self._dim(dim2)
    if d1 == d2: raise ShapeError(f"diagonal needs two different dims, got {dim1} and {dim2}")
    x = self.permute(*[i for i in range(self.ndim) if i not in (d1, d2)], d1, d2)
    x = x[..., max(-offset, 0):, max(offset, 0):]
    n = min(x.shape[-2:])
    square = x[..., :n, :n].flatten(-2)  # (k, k) is at k*(n+1)
    return square.pad((0, n)).unflatten(-1, (n, n + 1))[..., 0]  # rows of n+1: each row's first is (k, k)
  def diag(self) -> Tensor:  # a vector's square matrix with it on the diagonal
    if self.ndim != 1: raise ShapeError(f"diag needs a 1-d tensor, got shape {self.shape}")
    n = self.shape[0]
    return self.unsqueeze(-1).pad((0, n)).flatten()[:n * n].reshape(n, n)  # each value, then n zeros: n + 1 apart
  def pad_to(self, *shape, value=0.0) -> Tensor:  # padded after, to shape (None: as it is)
    shape = unpacked(shape)
    if len(shape) != self.ndim: raise ShapeError(f"pad_to {shape} doesn't match shape {self.shape}")
    if any(s is not None and s < n for s, n in zip(shape, self.shape)):
      raise ValueError(f"can't pad {self.shape} to the smaller {shape}")  # (tinygrad's error)
    return self.pad(tuple((0, s - n if s is not None else 0) for s, n in zip(shape, self.shape)), value=value)
  def shrink_to(self, *shape) -> Tensor:
    return self.shrink(tuple(None if s is None else (0, s) for s in unpacked(shape)))
  def contiguous(self) -> Tensor:  # (all of a buffer, or of a write into one, is itself)
    return self if _whole_view_of(self.uop) is not None else self.clone()
  def clone(self, device:str|None=None) -> Tensor:  # a copy (on device, where one is given)
    if device is not None and Device.canonical(device) != self.device: return self.to(device)
    return self._like(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  # its value in a buffer of its own: hash-consing makes equal graphs one node, realized into one buffer, and a tensor
  # that is written or trained needs a buffer no other tensor shares
  def _owned(self) -> Tensor: return Tensor.empty(*self.shape, dtype=self.dtype, device=self.device).assign(self)
  def contiguous_backward(self) -> Tensor: return self  # (a gradient is stored where the scheduler decides, as all are)

  # --- composites
  @composite
  def dot(self, w:Tensor, dtype=None) -> Tensor:
    """matmul is reshape + expand + multiply + sum over the shared axis: no special kernel. dtype: the result's."""
    w = self._const(w)
    n1, n2 = self.ndim, w.ndim
    if n1 == 0 or n2 == 0: raise ShapeError(f"matmul needs tensors of at least 1 dim, got {self.shape} and {w.shape}")
    shared = -2 if n2 > 1 else -1  # w's dim that meets x's last: its rows (w: (..., K, N)), or its only one
    gap = (1,) if n1 > 1 and n2 > 1 else ()  # both matrices: a 1 in x for w's columns, in w for x's rows
    if self.shape[-1] != w.shape[shared]:
      raise ShapeError(f"matmul shapes {self.shape} and {w.shape} don't match on the shared dim")
    x = self.reshape(self.shape[:-1] + gap + self.shape[-1:])  # a matrix x: (..., M, 1, K)
    w = w.reshape(w.shape[:-2] + gap + w.shape[shared:]).transpose(-1, shared)  # a matrix w: (..., 1, N, K)
    # an int matmul keeps its dtype, as numpy's and torch's (sum: int64); 16-bit floats multiply exactly in float32
    # and add up there, as torch's and a tensor core's
    promoted = dtypes.promote(x.dtype, w.dtype)
    return (x.float() * w.float() if promoted in dtypes.narrow else x * w).sum(-1).cast(dtype or promoted)
  __matmul__ = matmul = dot
  @composite
  def linear(self, weight:Tensor, bias:Tensor|None=None, dtype=None) -> Tensor:
    x = self * weight if weight.ndim == 1 else self.dot(weight, dtype)
    return x if bias is None else x + bias
  @composite
  def layernorm(self, axis=-1, eps:float=1e-5) -> Tensor:  # each row to mean 0 and variance 1
    x = self - self.mean(axis, keepdim=True)
    return x * ((x * x).mean(axis, keepdim=True) + eps).rsqrt()
  def batchnorm(self, weight:Tensor|None, bias:Tensor|None, mean:Tensor, invstd:Tensor, axis=1) -> Tensor:
    """(x - mean) * invstd * weight + bias, each of those given along axis (the channels)."""
    axes = self._axes(axis)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = (self - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    return x if bias is None else x + bias.reshape(shape)
  def _pool(self, kernel:tuple[int, ...], stride=1, dilation=1) -> Tensor:
    """(..., *size) -> (..., *out, *kernel): what each kernel position meets at each output position, as a view (no
    data moves). Along a dim of size n, the input is repeated and read in rows of a length dilation more than a multiple
    of n, so row j starts j*dilation further on; each row is cut to its out steps of stride. (n=5, kernel 3, stride 1,
    dilation 1: 0 1 2 3 4 0 | 1 2 3 4 0 1 | 2 3 4 0 1 2, each cut to 3: kernel place j at output i reads input i+j.)"""
    dims = len(kernel)
    stride, dilation = per_dim(stride, dims), per_dim(dilation, dims)
    lead, size = self.ndim - dims, self.shape[-dims:]
    out = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(size, kernel, stride, dilation)]
    if any(v <= 0 for v in out): raise ShapeError(f"a kernel {tuple(kernel)} is larger than the (padded) input {size}")
    x = self
    for i, (n, k, step, dil, o) in reversed(list(enumerate(zip(size, kernel, stride, dilation, out)))):
      p = lead + i  # dim p, of size n, becomes (kernel, out)
      row = dil + n * max(1, cdiv(o * step - dil, n))  # long enough for the o windows (o*step), and at least n + dil
      x = x.unsqueeze(p).expand(*x.shape[:p], cdiv(k * row, n), n, *x.shape[p+1:]).flatten(p, p + 1)  # repeated
      x = x._along(p, 0, k * row).unflatten(p, (k, row))  # k rows: kernel place j reads from j*dil on
      x = x._along(p + 1, 0, o * step).unflatten(p + 1, (o, step))  # each row cut into o steps
      x = x._along(p + 2, 0, 1).squeeze(p + 2)  # a step's first element: (kernel, out) at p, p + 1
    outs, kernels = [lead + 2 * i + 1 for i in range(dims)], [lead + 2 * i for i in range(dims)]
    return x.permute(*range(lead), *outs, *kernels)
  @composite
  def conv2d(self, weight:Tensor, bias:Tensor|None=None, groups=1, stride=1, dilation=1, padding=0,
             dtype=None) -> Tensor:
    """(N, C, *size) with weight (O, C/groups, *kernel) -> (N, O, *out), for any number of spatial dims as tinygrad's:
    the input padded, its windows (_pool) stored as rows, one for each channel and kernel position, over the output
    positions (im2col, the output's last dim innermost: read and written as vectors), then a matmul with the weights
    (a 32x32x32x32 3x3 conv to 64 channels: 2.6x faster than one reduce over the windows as views)."""
    (n, c, *size), (o, per_group, *kernel) = self.shape, weight.shape
    if self.ndim != weight.ndim or self.ndim < 3 or c != per_group * groups or o % groups:
      raise ShapeError(f"conv2d of {self.shape} with weight {weight.shape} and groups={groups}: channels don't match")
    cols = self.pad((None, None, *pad_pairs(padding, len(size))))._pool(tuple(kernel), stride, dilation)
    dims = len(size)
    out = cols.shape[2:2 + dims]
    # (C, *kernel) by (N, *out): a matmul with the weights
    windows = cols.permute(1, *range(2 + dims, 2 + 2 * dims), 0, *range(2, 2 + dims)).contiguous()
    per_output = c // groups * prod(kernel)
    y = weight.reshape(groups, o // groups, per_output).dot(windows.reshape(groups, per_output, n * prod(out)), dtype)
    y = y.reshape(o, n, *out).permute(1, 0, *range(2, 2 + dims))
    return y if bias is None else y + bias.reshape(1, o, *(1,) * dims)
  def conv_transpose2d(self, weight:Tensor, bias:Tensor|None=None, groups=1, stride=1, dilation=1, padding=0,
                       output_padding=0) -> Tensor:
    """The gradient of conv2d with respect to its input: the input spread stride apart, padded by what the kernel
    overhangs, convolved with the kernel flipped, its in and out channels swapped. weight is (C, O/groups, *kernel)."""
    (c, per_group, *kernel), dims = weight.shape, weight.ndim - 2
    stride, dilation, output_padding = per_dim(stride, dims), per_dim(dilation, dims), per_dim(output_padding, dims)
    padding = pad_pairs(padding, dims)
    # the output's size; where the padding leaves a dim empty, the result is empty, as torch's
    out = [(n - 1) * s - b - a + dil * (k - 1) + extra + 1
           for n, s, (b, a), dil, k, extra in zip(self.shape[2:], stride, padding, dilation, kernel, output_padding)]
    if 0 in out: return Tensor.zeros(self.shape[0], groups * per_group, *out, dtype=self.dtype, device=self.device)
    x = self
    for i, s in enumerate(stride):  # (n) -> (n, 1) -> padded to (n, s) -> (n*s) -> the last s-1 zeros cut
      dim, n = 2 + i, x.shape[2 + i]
      x = x.unsqueeze(dim + 1)._pad_along(dim + 1, 0, s - 1).flatten(dim, dim + 1)._along(dim, 0, n * s - (s - 1))
    w = weight.reshape(groups, c // groups, per_group, *kernel).transpose(1, 2).flip(tuple(range(3, 3 + dims)))
    pads = [((k - 1) * dil - b, (k - 1) * dil - a + extra)
            for k, dil, (b, a), extra in zip(kernel, dilation, padding, output_padding)]
    return x.conv2d(w.reshape(groups * per_group, c // groups, *kernel), bias, groups, 1, dilation,
                    [v for p in reversed(pads) for v in p])  # (torch's flat order: the last dim first)
  def _pooling(self, kernel_size, stride, dilation, padding, ceil_mode) -> Pooling:
    kernel = per_dim(kernel_size, 2)
    dims = len(kernel)
    stride, dilation = per_dim(kernel if stride is None else stride, dims), per_dim(dilation, dims)
    pads = pad_pairs(padding, dims)
    extra = [0] * dims
    for i, (n, k, s, d, (b, a)) in enumerate(zip(self.shape[-dims:], kernel, stride, dilation, pads)):
      span = n + b + a - d * (k - 1) - 1  # the last place a window may start; windows start every s
      last = span // s * s  # where the last window starts without ceil_mode
      # ceil_mode: one more window where it would start inside the input or its padding before (torch's rule: one that
      # would start in the padding after is dropped)
      if ceil_mode and span % s and last + s < n + b: extra[i] = s - span % s
    return Pooling(kernel, stride, dilation, pads, extra)
  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, return_indices=False):
    pool = self._pooling(kernel_size, stride, dilation, padding, ceil_mode)
    grow, axes = (*[None] * (self.ndim - len(pool.kernel)), *pool.grown), tuple(range(-len(pool.kernel), 0))
    x = self.contiguous() if return_indices else self  # (compared with their maxes: see argmax)
    windows = x.pad(grow, value=dtypes.min(self.dtype))._pool(pool.kernel, pool.stride, pool.dilation)
    top = windows.max(axes, keepdim=True)
    if not return_indices: return top.reshape(top.shape[:-len(axes)])
    size = prod(self.shape[-len(axes):])  # each input place's flat number, counted down: the max's first is largest
    countdown = Tensor.arange(size, 0, -1, device=self.device).reshape(self.shape[-len(axes):]).pad(pool.grown)
    where = size - (windows._at_max(top) * countdown._pool(pool.kernel, pool.stride, pool.dilation)).max(axes)
    return top.reshape(top.shape[:-len(axes)]), where.cast(dtypes.int32)
  @composite
  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, count_include_pad=True):
    pool = self._pooling(kernel_size, stride, dilation, padding, ceil_mode)
    lead, axes = [None] * (self.ndim - len(pool.kernel)), tuple(range(-len(pool.kernel), 0))
    sums = self.pad((*lead, *pool.grown))._pool(pool.kernel, pool.stride, pool.dilation).sum(axes)
    # what each window counts: padding too, or not
    ones = Tensor.ones(*self.shape[-len(axes):], dtype=sums.dtype, device=self.device)
    if any(b or a for b, a in pool.pads): ones = ones.pad(pool.pads, value=1.0 if count_include_pad else 0.0)
    return sums / ones.pad([(0, e) for e in pool.extra])._pool(pool.kernel, pool.stride, pool.dilation).sum(axes)
  def max_unpool2d(self, indices:Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None):
    """Each value put back at its index (max_pool2d's) in an output of zeros."""
    n, c, *size = self.shape
    if output_size is None:
      pool = self._pooling(kernel_size, stride, dilation, padding, False)
      output_size = [(i - 1) * s - b - a + d * (k - 1) + 1
                     for i, k, s, d, (b, a) in zip(size, pool.kernel, pool.stride, pool.dilation, pool.pads)]
    output_size = tuple(output_size)[-len(size):]
    hit = indices.reshape(n, c, -1)._one_hot(prod(output_size))
    return hit.where(self.reshape(n, c, -1, 1), 0).sum(2).reshape(n, c, *output_size).cast(self.dtype)
  def interpolate(self, size, mode="linear", align_corners=False) -> Tensor:
    """The last len(size) dims resized, as torch's interpolate: "linear" (bilinear, trilinear: one dim at a time) by
    lerping the two nearest inputs, "nearest" and "nearest-exact" by picking one."""
    if mode not in ("linear", "nearest", "nearest-exact"):
      raise ValueError(f"interpolate's mode {mode!r} is not linear, nearest or nearest-exact")
    if align_corners and mode != "linear": raise ValueError(f"align_corners is for mode linear, not {mode!r}")
    x = self._float() if mode == "linear" else self
    places = dtypes.double if self.dtype == dtypes.double else dtypes.float  # (where a source pixel is: torch's)
    for d, new in zip(range(self.ndim - len(size), self.ndim), size):
      n, at = x.shape[d], Tensor.arange(new, dtype=places, device=self.device)
      before = (slice(None),) * d  # (the dims before d, whole)
      if mode == "linear":
        if align_corners: pos = at * ((n - 1) / (new - 1) if new > 1 else 0)
        else: pos = ((at + 0.5) * (n / new) - 0.5).maximum(0)  # (pixel centers, as torch's)
        low = pos.floor().minimum(n - 1)
        frac = (pos - low).reshape(new, *(1,) * (self.ndim - d - 1))
        x = x[(*before, low.int())].lerp(x[(*before, (low + 1).minimum(n - 1).int())], frac)
      else:  # nearest: each output's source pixel (nearest-exact: by pixel centers)
        src = at + 0.5 if mode == "nearest-exact" else at
        x = x[(*before, (src * (n / new)).int().minimum(n - 1))]
    return (x.round() if dtypes.is_int(self.dtype) else x).cast(self.dtype)  # (an int image's lerps rounded: torch's)
  def scaled_dot_product_attention(self, key:Tensor, value:Tensor, attn_mask:Tensor|None=None, dropout_p=0.0,
                                   is_causal=False, enable_gqa=False) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v; a bool mask keeps where True, is_causal keeps each query's past and itself;
    enable_gqa repeats the key and value heads for groups of query heads."""
    if enable_gqa: key, value = [t.repeat_interleave(self.shape[-3] // t.shape[-3], dim=-3) for t in (key, value)]
    scores = self @ key.transpose(-2, -1) / math.sqrt(self.shape[-1])
    if is_causal and attn_mask is not None:
      raise RuntimeError("scaled_dot_product_attention takes attn_mask or is_causal, not both")
    if is_causal: attn_mask = Tensor.ones(*scores.shape[-2:], dtype=dtypes.bool, device=self.device).tril()
    if attn_mask is not None:
      bias = attn_mask.where(0, -math.inf).cast(scores.dtype) if attn_mask.dtype == dtypes.bool else attn_mask
      scores = scores + bias
    return scores.softmax(-1).dropout(dropout_p) @ value
  @staticmethod
  def einsum(formula:str, *operands, dtype=None) -> Tensor:
    """Sums of products named by letters, as numpy's einsum ("ij,jk->ik" is a matmul): each operand's dims laid out
    on all the letters (a letter it lacks is a dim of 1), multiplied, and the letters not in the output summed."""
    ts = list(unpacked(operands))
    lhs, arrow, out = formula.replace(" ", "").partition("->")
    names = lhs.split(",")
    if len(names) != len(ts): raise ValueError(f"einsum {formula!r} names {len(names)} operands, got {len(ts)}")
    def covered(t, n): return t.ndim - len(n.replace("...", ""))  # the dims ... stands for in t
    dots = max([covered(t, n) for t, n in zip(ts, names) if "..." in n], default=0)  # the dims of the widest "..."
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in formula]  # letters the formula doesn't use
    ellipsis = "".join(spare[:dots])  # one for each dim of the widest "..."
    # an operand whose "..." covers fewer dims takes the last of those letters: its dims broadcast from the right
    names = [n.replace("...", ellipsis[dots - covered(t, n):]) for t, n in zip(ts, names)]
    joined = "".join(names)
    once = sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ellipsis)
    if not arrow: out = ellipsis + "".join(once)  # no output given: the letters named once, sorted, as numpy's
    out = out.replace("...", ellipsis)
    if missing := [c for c in out if c not in joined]:
      raise ShapeError(f"einsum {formula!r}: the output's {', '.join(missing)} names no operand's dim")
    letters = out + "".join(dict.fromkeys(c for c in joined if c not in out))
    for k, (t, n) in enumerate(zip(ts, names)):
      if len(n) != t.ndim: raise ShapeError(f"einsum operand {n!r} doesn't name each of the dims of shape {t.shape}")
      for c in dict.fromkeys(n):
        while n.count(c) > 1:  # a letter twice: the diagonal ("ii")
          i, j = n.index(c), n.index(c, n.index(c) + 1)
          ts[k] = ts[k].diagonal(0, i, j)
          n = n[:i] + n[i+1:j] + n[j+1:] + c  # diagonal() puts the dim last
      names[k] = n
    # each operand permuted into the order of the letters, with a 1 for each letter it lacks
    laid = [t.permute(*sorted(range(t.ndim), key=lambda i: letters.index(n[i])))
             .reshape(*[t.shape[n.index(c)] if c in n else 1 for c in letters]) for t, n in zip(ts, names)]
    total = functools.reduce(Tensor.mul, laid)
    return (total.sum(tuple(range(len(out), len(letters)))) if len(letters) > len(out)
            else total).cast(dtype or total.dtype)
  def rearrange(self, formula:str, **sizes) -> Tensor:
    """einops' rearrange: "b (h w) c -> b h w c", h=2: names for the dims (a group in parentheses is one dim of their
    product), moved to the right side's order and grouped as it says."""
    def names(group:str, name:str) -> list[str]:  # a group's, in parentheses; or one name ("1": a dim of 1, none)
      if not name: return group.split()
      return [] if name == "1" else [name]
    def side(text:str) -> list[list[str]]: return [names(*m) for m in re.findall(r"\(([^()]*)\)|([^\s()]+)", text)]
    formula = formula.replace("…", "...")
    if re.sub(r"\([^()]*\)|[^\s()]+", "", formula).strip():
      raise ShapeError(f"rearrange {formula!r}: parentheses must pair, one deep")
    words = re.findall(r"[^\s()]+", formula.replace("->", " "))
    if bad := [w for w in words if w not in ("...", "1") and not (w.isidentifier() and w[0] != "_")] + \
              [f"{k}=" for k in sizes if k not in words]:  # (einops' rules: names are words; each size is used)
      raise ShapeError(f"rearrange {formula!r}: {', '.join(bad)} is not a dim's name")
    left, right = formula.split("->")
    # the dims "..." stands for, named _0, _1, ... (side() counts "..." as one name: + 1)
    extra = self.ndim - len(side(left)) + 1 if "..." in left else 0
    lhs, rhs = [side(t.replace("...", " ".join(f"_{k}" for k in range(extra)))) for t in (left, right)]
    if len(lhs) != self.ndim: raise ShapeError(f"rearrange {formula!r} names {len(lhs)} dims for shape {self.shape}")
    if sorted(n for g in lhs for n in g) != sorted(n for g in rhs for n in g):
      raise ValueError(f"rearrange {formula!r}: each side must name the same dims")
    found = dict(sizes)
    for g, n in zip(lhs, self.shape):
      known = prod(found[name] for name in g if name in found)
      found |= {name: n // known for name in g if name not in found}
    names = [name for g in lhs for name in g]
    x = self.reshape(*[found[name] for name in names])
    x = x.permute(*[names.index(name) for g in rhs for name in g])
    return x.reshape(*[prod(found[name] for name in g) for g in rhs])
  def sequential(self, layers:list[Callable]) -> Tensor: return functools.reduce(lambda x, f: f(x), layers, self)

  # --- losses: reduction is "mean", "sum" or "none"
  def _reduction(self, reduction:str) -> Tensor:
    reduce = {"mean": Tensor.mean, "sum": Tensor.sum, "none": lambda t: t}
    if reduction not in reduce: raise ValueError(f"reduction is 'mean', 'sum' or 'none', not {reduction!r}")
    return reduce[reduction](self)
  @composite
  def cross_entropy(self, Y:Tensor, reduction="mean", label_smoothing=0.0) -> Tensor:
    """Logits (N, C, ...) or (C,) against class indices, or probabilities of the logits' shape."""
    if not 0 <= label_smoothing <= 1: raise ValueError(f"label_smoothing={label_smoothing} is not in [0, 1]")
    classes = 0 if self.ndim == 1 else 1
    indices = self.shape[:classes] + self.shape[classes + 1:]  # the shape of class indices
    if Y.shape not in (self.shape, indices):
      raise ShapeError(f"cross_entropy of logits {self.shape} needs class indices of shape {indices} or probabilities "
                       f"of the logits' shape, got {Y.shape}")
    if Y.shape == indices: Y = Y._one_hot(self.shape[classes], classes).cast(self.dtype)  # (a half's loss stays half)
    Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[classes]
    # (0 where Y is: a class masked to -inf would give 0 * -inf, nan)
    return -(Y == 0).where(0, self.log_softmax(classes) * Y).sum(classes)._reduction(reduction)
  def nll_loss(self, Y:Tensor, weight:Tensor|None=None, ignore_index:int|None=None, reduction="mean") -> Tensor:
    if self.ndim == 1:  # one sample, (C,), and a 0-d target: as a batch of one
      loss = self.unsqueeze(0).nll_loss(Y.reshape(1), weight, ignore_index, reduction)
      return loss.reshape(()) if reduction == "none" else loss
    w = Y.ones_like(self._float().dtype) if weight is None else weight[Y]
    if ignore_index is not None: w = w * (Y != ignore_index)
    loss = -self.gather(1, Y.unsqueeze(1)).squeeze(1) * w
    return loss.sum() / w.sum() if reduction == "mean" else loss._reduction(reduction)
  @composite
  def sparse_categorical_crossentropy(self, Y:Tensor, ignore_index=-1, label_smoothing=0.0, reduction="mean") -> Tensor:
    """Logits (..., C) against class indices (...), ignore_index's not counted."""
    logp, keep = self.log_softmax(-1), (Y != ignore_index)
    picked = Y.one_hot(self.shape[-1]).cast(dtypes.bool).where(logp, 0).sum(-1)  # (a class at -inf: not 0 * -inf)
    loss = -((1 - label_smoothing) * picked + (label_smoothing * logp.mean(-1) if label_smoothing else 0)) * keep
    return loss.sum() / keep.sum() if reduction == "mean" else loss._reduction(reduction)
  @composite
  def binary_crossentropy(self, Y:Tensor, reduction="mean") -> Tensor:
    return (-Y * self.log().maximum(-100) - (1 - Y) * (1 - self).log().maximum(-100))._reduction(reduction)  # (torch's)
  @composite
  def binary_crossentropy_logits(self, Y:Tensor, reduction="mean", pos_weight:Tensor|None=None) -> Tensor:
    return (-((1 if pos_weight is None else pos_weight) * Y * self.logsigmoid()
              + (1 - Y) * (-self).logsigmoid()))._reduction(reduction)

  # --- gradients: the rules and the walk are the next section
  @property
  def requires_grad(self) -> bool|None: return self.__dict__.get("_requires_grad")  # None: never said
  @requires_grad.setter
  def requires_grad(self, value:bool|None):
    if value and not dtypes.is_float(self.dtype):
      raise DTypeError(f"only float tensors can require gradients, not {self.dtype.name}")
    self._requires_grad = value
    if value:
      make_trainable(self)
      Tensor._trainable[id(self)] = self
    else: Tensor._trainable.pop(id(self), None)
  def gradient(self, *targets:Tensor, gradient:Tensor|None=None, materialize_grads=False) -> list[Tensor]:
    """The gradients of this tensor (a scalar, or weighted by gradient) with respect to targets, as lazy tensors. One
    it doesn't depend on, or only through a comparison, is zeros; one it reaches only through ints (a cast to int and
    back) raises, naming the op that stopped it, unless materialize_grads: zeros."""
    for t in targets:
      if not dtypes.is_float(t.dtype):
        raise DTypeError(f"can't take a gradient with respect to a tensor of {t.dtype.name}")
    nodes = [_grad_node(t.uop) for t in targets]
    grads, stops = gradients(self, self._start(gradient), nodes)
    for t, node in zip(targets, nodes):
      if node not in grads and stops and not materialize_grads:
        raise RuntimeError(f"no gradient of {self!r} with respect to {t!r}: it reaches it only through ops that pass "
                           f"no gradient there ({', '.join(sorted(stops))})")
    return [grads[node] if node in grads else t.zeros_like() for t, node in zip(targets, nodes)]
  def backward(self, gradient:Tensor|None=None) -> Tensor:
    """Adds this tensor's gradients (a scalar's, or weighted by gradient) to .grad of the tensors requiring grad."""
    trainable = list(Tensor._trainable.values())
    grads, _ = gradients(self, self._start(gradient), [_grad_node(t.uop) for t in trainable])
    for t in trainable:
      if (g := grads.get(_grad_node(t.uop))) is None: continue
      # (each a tensor of its own, the same on the next backward, as torch's and tinygrad's; not a write into its
      # buffer: equal gradients share one)
      t.grad = Tensor._of(g.uop, g.device) if t.grad is None else t.grad.replace(t.grad + g)
    return self
  def _start(self, gradient:Tensor|None) -> Tensor:  # the gradient of this tensor a walk starts from
    if not dtypes.is_float(self.dtype): raise DTypeError(f"can't differentiate a tensor of {self.dtype.name}")
    if gradient is None and self.numel() != 1:  # (AssertionErrors: tinygrad's)
      raise AssertionError(f"backward of a tensor of shape {self.shape} needs a scalar, or gradient= of its shape")
    if gradient is not None and gradient.shape != self.shape:
      raise AssertionError(f"gradient of shape {gradient.shape} for a tensor of shape {self.shape}")
    return self.ones_like() if gradient is None else gradient.cast(self.dtype)
  def detach(self) -> Tensor: return self._viewing(self.uop.detached())
  class train(contextlib.ContextDecorator):
    """with Tensor.train(): or @Tensor.train(): Tensor.training is mode inside, what it was after."""
    def __init__(self, mode:bool=True): self.mode = mode
    def __enter__(self): self.before, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc): Tensor.training = self.before

  # --- realization
  def assign(self, x) -> Tensor:
    """Writes x into this tensor's buffer in place, lazily: when this tensor is next realized. A tensor computed from
    this one before keeps the value it had: it is realized first, if it would read the buffer. x may be a Python
    number (written everywhere), list or array, as tinygrad's."""
    if not isinstance(x, (Tensor, numbers.Number)): x = Tensor(x, self.dtype, self.device)
    x = self._const(x).cast(self.dtype)
    if x.device != self.device: raise ValueError(f"can't assign a tensor on {x.device} to one on {self.device}")
    if broadcast_shape(x.shape, self.shape) != self.shape:  # (broadcast, as torch's copy_ and tinygrad's)
      raise ShapeError(f"can't assign a tensor of shape {x.shape} to one of {self.shape}")
    x = x._expand(self.shape)
    if self.uop.op is not Ops.ASSIGN and not (_whole_buffer(self.uop) and not self.uop.arg.detached):
      if (owner := self._graph_owner()) is not None: owner._into_buffer()  # (this is a view of that buffer now)
      if (base := self._base()) is not None: return self._write_through(base, x)
      self._into_buffer()  # one to write into
    sharing = Tensor._realize_readers({self._written().src[0]}, self, x, owner=self._owner())
    self._write(x)
    Tensor._read_writes(sharing)
    return self
  def _graph_owner(self) -> Tensor|None:
    """This view's owner where the view reads the owner's graph (the owner has no buffer yet), else None. A write
    through the view gives the owner a buffer first, a realize computes the owner instead, and _hold makes the view a
    view of that buffer: the write is the owner's, as torch's (t[1][2] = 5 into a t not yet computed)."""
    if (owner := self._owner()) is None or self.uop.op is not Ops.VIEW: return None
    if self.uop.src[0].op in (Ops.BUFFER, Ops.ASSIGN): return None
    # (made by moves from the owner's graph as it still is: not one written since, whose old value the view keeps)
    return owner if _made_from(self.uop, owner.uop, owner.uop) is not None else None
  def _into_buffer(self): self._hold(self._owned().uop)  # its value, in a buffer of its own
  def _hold(self, uop:UOp):
    """This tensor's value, held in a buffer from now on (uop). The views taken from it while it had none read its
    graph: they become views of the buffer, so that they show what is written into it, as torch's views do."""
    was, self.uop = self.uop, uop
    if not self.graph_viewed: return
    self.graph_viewed = False
    for t in Tensor._alive():
      if t._owner() is self and t.uop.op is Ops.VIEW and (view := _made_from(t.uop, was, uop)) is not None:
        t.uop = view
  def _written(self) -> UOp: return self.uop.src[0] if self.uop.op is Ops.ASSIGN else self.uop  # its buffer's view
  def _base(self) -> Tensor|None:
    """The whole of the buffer this tensor views part of, or of a write pending into one (torch's base), where its
    moves lead back to it, each element to one of it: not an expand, nor a pad it reads (torch's are copies; a pad
    that later moves cut away, as a strided slice's, leaves an outer view whose mask leaves nothing out)."""
    if _aliased(self.uop) is None: return None
    (start, moves), source = self.uop.arg.path, self.uop.src[0]
    if any(move.name == "expand" for move in moves) or self.uop.arg.views[-1].reads_pad: return None
    whole = source if source.op is Ops.ASSIGN else UOp(Ops.VIEW, self.dtype, (source,), start)
    # (the tensor this view was taken from, where it is that whole, detached or not)
    if (owner := self._owner()) is not None and owner.uop in (whole, UOp(Ops.VIEW, self.dtype, (source,), start.bare)):
      return owner
    return Tensor._of(whole, self.device)
  def _write_through(self, base:Tensor, x:Tensor) -> Tensor:
    """A write into a view of part of a buffer writes the buffer there, as torch's (t[:3].assign(x), t[1][2] = 5): x,
    and a mask of where it goes, moved back through the view's moves (as a gradient is), then put where the mask is."""
    mask = _moved_back(self.ones_like(dtypes.bool), self.uop)
    value = mask.where(_moved_back(x, self.uop), base)
    # (not base.assign: the tensors holding the buffer, a node equal to the base's, share this write; where the base
    # is the tensor this view was taken from, the others are equal graphs, copied)
    owner = base if base is self._owner() else None
    sharing = Tensor._realize_readers({base._written().src[0]}, self, x, value, owner=owner)
    base._write(value, seen=not self.uop.arg.detached)
    Tensor._read_writes([t for t in sharing if t is not base])
    self.uop = UOp(Ops.VIEW, self.dtype, (base.uop,), self.uop.arg)  # it reads the write
    self._keep(x, base)
    return self
  def _write(self, x:Tensor, seen:bool|None=True) -> Tensor:
    """assign's write, once what reads this tensor's buffer is realized (an optimizer's step: one pass for all the
    buffers it writes). Not seen: through a detached view, which gradients pass by; None: an optimizer's, of detached
    values, which no gradient reaches (as torch's, under no_grad)."""
    x = x.cast(self.dtype)
    written, value = self._written(), x.uop
    buffer = written.src[0].arg
    # (hash-consing may give back an assign node that already ran: unrealized() drops its note, so this write runs)
    write = unrealized(UOp(Ops.ASSIGN, self.dtype, (written, value)))
    old = self.uop if self.uop.op is Ops.ASSIGN else written.replace(arg=written.arg.bare)  # (what it replaces)
    if seen is not None and (value_seen := _value_seen(write, old, seen)) is not None:
      write.__dict__["value_seen"] = value_seen
    buffer.note_write()  # (pending: what was realized into the buffer is stale already)
    buffer.pending, buffer.assigned = self, True
    self.uop = write
    self._keep(x, self)
    return self
  def _keep(self, x:Tensor, whole:Tensor):
    """x, just written here (whole: the write into all of the buffer), where its graph reads the buffer it replaces:
    a view of the buffer is pointed at the same view of the write, anything else at a copy of this value (computed
    only if read). A buffer itself (its own assign, or a whole buffer) stays."""
    buffer = whole._written().src[0]
    if x.uop.op is Ops.ASSIGN or _whole_buffer(x.uop) or buffer not in x.uop.buffers: return
    x.uop = _moved_over(x.uop, whole.uop) if _aliased(x.uop) is buffer else self.clone().uop
  @staticmethod
  def _alive() -> list[Tensor]:  # the tensors alive, in the order made; the dead references go from Tensor._live
    found = [(k, ref, ref()) for k, ref in Tensor._live.items()]
    Tensor._live = {k: ref for k, ref, t in found if t is not None}
    return [t for _, _, t in found if t is not None]
  @staticmethod
  def _realize_readers(buffers:set[UOp], *skip:Tensor, owner:Tensor|None=None) -> list[Tensor]:
    """Realizes, as they are now, the tensors whose values would change if these buffers (BUFFER nodes) were written:
    - one whose graph reads such a buffer: realized now (a view that doesn't begin from all of it, or that reads
      padding, as torch's pad is a copy: copied first);
    - one that is such a buffer, whole, or another view of it: left as it is, it holds or shows what is written
      (returned: the tensors sharing the buffers, as torch's views); unless its node is a skipped tensor's too, or the
      owner's (the tensor a written view was taken from), made by no move, and the buffer was never assigned (two
      LayerNorms' weights, each ones(n): equal graphs are one node, realized into one buffer): then copied, so that each
      holds its own, and the views taken from the copied tensor become views of its copy."""
    skipped, skipped_nodes = {id(s) for s in skip}, {s.uop for s in (*skip, owner) if s is not None}
    readers, sharing = [], []
    for t in Tensor._alive():  # (in the order made, so that a step's plan is found again on the next)
      if id(t) in skipped or buffers.isdisjoint(t.uop.buffers): continue
      if (whole := _whole_view_of(t.uop)) in buffers:  # it will hold what is written
        moved = t.uop.op is Ops.VIEW and t.uop.arg.move is not None  # (a view of one tensor: t.reshape(1, n), detach)
        shared = t is owner or t.uop not in skipped_nodes or whole.arg.assigned or moved
        (sharing if shared else readers).append(t)
      else:
        (sharing if _aliased(t.uop) in buffers and not t.uop.arg.views[-1].reads_pad else readers).append(t)
    copied = {id(t) for t in readers if _whole_view_of(t.uop) in buffers}  # (all of a written buffer: equal graphs)
    for t in readers:
      # (a view of the buffer, or of a write into it: copied, what it reads now)
      if t.uop.op is Ops.VIEW and (t.uop.src[0] in buffers or _aliased(t.uop) in buffers): t.uop = t.clone().uop
    if readers: readers[0].realize(*readers[1:])
    moved = [t for t in sharing if id(t._owner()) in copied]  # views taken from a copied tensor: views of its copy
    for t in moved: t.uop = _moved_over(t.uop, t._owner().uop)
    return [t for t in sharing if id(t._owner()) not in copied]
  @staticmethod
  def _read_writes(sharing:list[Tensor]):
    """Each tensor sharing a buffer that has a write pending reads the write: what is built from it after is built
    from the write, so a realize that holds both runs the write first (a detached one, detached: no gradient)."""
    for t in sharing:
      if (whole := _whole_view_of(t.uop)) is not None:
        if (writer := whole.arg.pending) is None: continue
        view = writer.reshape(t.shape)
        t.uop = (view.detach() if t.uop.op is Ops.VIEW and t.uop.arg.detached else view).uop
      elif (writer := _aliased(t.uop).arg.pending) is not None: t.uop = _moved_over(t.uop, writer.uop)
  def realize(self, *others:Tensor) -> Tensor:
    # (a view of a tensor not computed: that tensor is computed, and the view is a view of it, see _graph_owner)
    ts = [t if (owner := t._graph_owner()) is None else owner for t in (self, *others)]
    # (one held in a buffer that no write is pending into has nothing to run: a TinyJit's outputs)
    ts = [t for t in ts if not t.uop.in_memory or t.uop.src[0].arg.pending is not None]
    for device in dict.fromkeys(t.device for t in ts):  # each device runs its own tensors' kernels
      Tensor._realized([t for t in ts if t.device == device], device)
    return self
  @staticmethod
  def _realized(group:list[Tensor], device:str):
    """Runs the plan of these tensors' graph (made once per structure), notes each assign done, and points each tensor
    at the view of the buffer that holds its value (where a gradient runs through it, noting what it was computed
    from: a realize changes no gradient)."""
    key, buffers, nodes = structure([t.uop for t in group], device)
    # a write pending into a buffer this graph reads, by a tensor sharing it, runs first (unless this graph has it)
    inside = set(nodes)
    if writers := [b.pending for b in buffers if b.pending is not None and b.pending.uop not in inside]:
      Tensor.realize(*writers)
      key, buffers, nodes = structure([t.uop for t in group], device)  # (a write it held is done now)
    plan = planned(key, nodes)
    bufs = plan.run(buffers, device)
    def bound(view:UOp) -> UOp: return view.rebind(bufs[view.src[0].arg.index])  # a Slot's view: on this run's buffer
    last = {view.src[0]: entry for entry, view in plan.writes.items()}  # (writes into one buffer run in order)
    for entry, view in plan.writes.items():
      buffer = bufs[view.src[0].arg.index]
      buffer.pending = None  # (written)
      remember(nodes[entry], bound(view))
      if last[view.src[0]] != entry: buffer.note_write()  # (written over by the last: its value is gone)
    note_writes({nodes[e]: bound(v) for e, v in plan.writes.items()}, device)
    computed = [t.uop for t, view in zip(group, plan.root_views) if view is not None and t.uop.op is not Ops.ASSIGN]
    trained_from = reading_trainable(computed)
    # (where the graph reads results realized before: each read made over what they were computed from)
    over = bool(trained_from) and any(u.in_memory and "computed_from" in u.src[0].__dict__ for u in nodes)
    for t, view in zip(group, plan.root_views):
      # read from memory already (a view of a buffer stays one: a write through it reaches the buffer)
      if view is None or t.uop.in_memory:
        t._hold(realized_view(t.uop) or t.uop)
      elif (buffer := _aliased(t.uop)) is not None:  # a view of a write: of its buffer now, still shared
        t.uop = _moved_over(t.uop, _flat(buffer))
      else:
        held = bound(view)
        # (the gradient walk goes on through it)
        if t.uop in trained_from: note_computed_from(held, rebuild(t.uop, _read_over_origin) if over else t.uop, device)
        t._hold(remember(t.uop, held))
  def buffer(self) -> Buffer:
    """The device memory holding this tensor, computed (contiguous) first if needed. A view of a buffer, or of a tensor
    not computed (see _graph_owner), stays one (its copy is made for the call), so it still shows the buffer's writes,
    and a write through it reaches the buffer."""
    if (whole := _whole_view_of(self.uop)) is None:  # (all of a buffer, or of a write into one, is it)
      if _aliased(self.uop) is not None or self._graph_owner() is not None: return self.contiguous().realize().buffer()
      self._hold(self.contiguous().realize().uop)
      whole = self.uop.src[0]
    if (writer := whole.arg.pending) is not None: writer.realize()  # (a tensor sharing it wrote it)
    return whole.arg
  def tolist(self):
    vals = list(decoded(self.dtype, self.buffer().copyout()))
    for k in range(self.ndim - 1, 0, -1):  # rows of dim k, innermost first; counted, so a size 0 anywhere works
      vals = [vals[i * self.shape[k]:(i + 1) * self.shape[k]] for i in range(prod(self.shape[:k]))]
    return vals if self.shape else vals[0]
  def item(self):
    if self.numel() != 1: raise ShapeError(f"item() needs a tensor of one element, got shape {self.shape}")
    return self.reshape(()).tolist()
  def data(self) -> memoryview:  # (an empty one's flat: a memoryview can't have a 0 in its shape)
    if self.dtype == dtypes.bfloat16:
      raise TypeError("a bfloat16 tensor has no buffer-protocol or numpy type: convert it first, e.g. .float()")
    return memoryview(self.buffer().copyout()).cast(self.dtype.fmt, *[self.shape] if self.numel() else [])
  def __reduce__(self):  # pickled (pickle, copy.deepcopy) as its values
    return Tensor._unpickled, (self.tolist(), self.shape, self.dtype, self.device, self.requires_grad)
  @staticmethod
  def _unpickled(values, shape, dtype, device, requires_grad) -> Tensor:  # (an empty one's list lacks its shape)
    if not prod(shape): return Tensor.empty(*shape, dtype=dtype, device=device)
    return Tensor(values, dtype, device, requires_grad)
  def numpy(self):  # (a bfloat16 tensor's as float32: numpy has no bfloat16, as tinygrad's)
    if self.dtype == dtypes.bfloat16: return self.float().numpy()
    import numpy as np
    return np.frombuffer(self.buffer().copyout(), dtype=np.dtype(self.dtype.fmt)).reshape(self.shape).copy()

# 2 - t is t.__rsub__(2): 2 made a tensor, minus t; t -= 2 is t.__isub__(2): an assign, which writes t's buffer
for _op in "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift".split():  # (f bound now: a default)
  setattr(Tensor, f"__r{_op}__", lambda self, x, f=getattr(operator, f"__{_op}__"): f(self._const(x), self))
  setattr(Tensor, f"__i{_op}__", lambda self, x, f=getattr(operator, f"__{_op}__"): self.assign(f(self, x)))
del _op
for _name in "float half double short bfloat16 int bool long".split():  # t.half() is t.cast(dtypes.half)
  setattr(Tensor, _name, lambda self, d=getattr(dtypes, _name): self.cast(d))
def _reversible(f:Callable) -> Callable:  # tinygrad's named binary ops: reverse=True is x op self
  @functools.wraps(f)
  def op(self, x, reverse=False, *args, **kwargs):
    return f(self._const(x), self, *args, **kwargs) if reverse else f(self, x, *args, **kwargs)
  return op
for _name in "add sub mul div pow mod bitwise_and bitwise_or bitwise_xor lshift rshift matmul".split():
  setattr(Tensor, _name, _reversible(getattr(Tensor, _name)))
del _name

# ---------------------------------------------------------------------------------------------------------------------
# Gradients: a derivative rule per primitive, and one walk that applies them from the loss back. A rule takes the
# gradient of a node's output (g), the output (y) and its sources, as tensors, and returns one for each source (None:
# none flows there). Gradients are lazy graphs like any other: scheduled and fused with the forward pass.

def _max_share(g:Tensor, a:Tensor, b:Tensor) -> Tensor:  # a's share of max(a, b)'s g: all where larger, half at a tie
  return (a > b).where(g, (a == b).where(g * 0.5, 0))

derivatives: dict[Ops, Callable] = {
  Ops.ADD: lambda g, y, a, b: (g, g),                                   # (a + b)' = a' + b'
  Ops.MUL: lambda g, y, a, b: (g * b, g * a),                           # (ab)' = a'b + ab'
  Ops.NEG: lambda g, y, x: (-g,),
  Ops.RECIP: lambda g, y, x: (-g * y * y,),                             # (1/x)' = -1/x^2
  Ops.FDIV: lambda g, y, a, b: (g / b, -g * y / b),                     # (a/b)' = a'/b - a b'/b^2
  Ops.SQRT: lambda g, y, x: (g / (y * 2),),                             # (sqrt x)' = 1 / (2 sqrt x)
  Ops.EXP2: lambda g, y, x: (g * y * math.log(2),),                     # (2^x)' = 2^x ln 2
  Ops.LOG2: lambda g, y, x: (g / (x * math.log(2)),),                   # (log2 x)' = 1 / (x ln 2)
  Ops.SIN: lambda g, y, x: (g * x.cos(),),                              # sin' = cos
  Ops.MAX: lambda g, y, a, b: (_max_share(g, a, b), _max_share(g, b, a)),     # to the larger; at a tie, half to each
  Ops.MOD: lambda g, y, a, b: (g, -g * a.div(b, rounding_mode="trunc")),  # fmod: a - trunc(a/b) b (torch's)
  Ops.WHERE: lambda g, y, c, a, b: (None, c.where(g, 0), c.where(0, g)),  # to the branch taken
  Ops.CAST: lambda g, y, x: (g.cast(x.dtype),),
  Ops.CONTIGUOUS: lambda g, y, x: (g,),
  Ops.ASSIGN: lambda g, y, value: (g,),                                 # to the value written (see _grad_sources)
  Ops.POW: lambda g, y, b, e, value: (g * (e == 0).where(0, e * b.pow(e - 1)),        # (b^e)' = e b^(e-1), and
                                      g * ((b == 0) & (e >= 0)).where(0, y * b.log()),  # d/de = b^e ln b, as torch's
                                      None),
  Ops.REDUCE_AXIS: lambda g, y, x: (_reduced(g, y, x),),
  Ops.VIEW: lambda g, y, x: (_unmoved(g, x.shape, y.uop.arg.move),),  # x: the view before its move
}

def _unmoved(g:Tensor, shape:tuple[int, ...], move:Move) -> Tensor: return unmoves[move.name](g, shape, move.arg)
def _moved_back(t:Tensor, view:UOp) -> Tensor:
  """t, of view's shape, moved back through the view's moves to where they began, as a gradient is (zeros where the
  view reads nothing)."""
  st = view.arg
  while True:
    if st.before is not None:
      t = _unmoved(t, st.before.shape, st.move)
      st = st.before
    elif st.move is not None and st.move.arg is not None: st = st.move.arg  # (a detach of a buffer's view: see path)
    else: return t

def _reduced(g:Tensor, y:Tensor, x:Tensor) -> Tensor:
  """A sum passes g to every element it adds; a product, g times the product of the others (y / x, or where x is 0,
  the product of the rest if it is the only 0); a max, g to the elements equal to it, split evenly among ties."""
  op, axes = y.uop.arg.op, y.uop.arg.axes
  if op is Ops.ADD: return g.expand(x.shape)
  if op is Ops.MUL:
    zero = x == 0
    rest = zero.where(1, x)._reduce_axis(Ops.MUL, axes)  # the product of the nonzero elements
    alone = (zero.sum(axes, keepdim=True) == 1).where(rest, 0)
    return g.expand(x.shape) * zero.where(alone.expand(x.shape), y.expand(x.shape) / x)
  x = x.contiguous()  # (stored, then compared with its max: see Tensor.argmax)
  hit = x._at_max(x._reduce_axis(Ops.MAX, axes).expand(x.shape)).cast(g.dtype)
  return hit * (g / hit.sum(axes, keepdim=True)).expand(x.shape)

# a move's inverse: (g, the shape before the move, the move's arg) -> g as a gradient of that shape
unmoves: dict[str, Callable] = {
  "reshape": lambda g, old, shape: g.reshape(old),
  "permute": lambda g, old, order: g.permute(argsort(order)),
  "expand": lambda g, old, shape: g.sum(tuple(i for i, (a, b) in enumerate(zip(old, shape)) if a != b), keepdim=True),
  "pad": lambda g, old, grow: g.shrink(tuple((b, b + s) for (b, _), s in zip(grow, old))),
  "shrink": lambda g, old, arg: g.pad(tuple((b, s - e) for (b, e), s in zip(arg, old))),
  "flip": lambda g, old, axes: g.flip(axes),
}

class Origin(NamedTuple):  # what a realized result was computed from
  graph: UOp
  when: int  # the tick then: a gradient taken after a write into the graph's buffers would be at other values
  device: str  # the graph's: a copy to another device (to()) is a result too, its gradient copied back

def origin(buffer:UOp, st:ShapeTracker) -> Origin|None:
  """What a realized result that a gradient path runs through was computed from (none past a detach). Tensor.realize
  notes it on the result's BUFFER node (Tensor.to: its copy's), by view: the note lives as long as the buffer, so a
  view taken of the result reaches it after the result's own tensor is gone."""
  if (notes := buffer.__dict__.get("computed_from")) is None or st.detached: return None
  return notes.get(_lying(st, buffer))
def note_computed_from(view:UOp, graph:UOp, device:str):
  notes = view.src[0].__dict__.setdefault("computed_from", {})
  notes[_lying(view.arg, view.src[0])] = Origin(graph, next(ticks), device)
def forget_computed_from(view:UOp):
  view.src[0].__dict__.get("computed_from", {}).pop(_lying(view.arg, view.src[0]), None)
def _lying(st:ShapeTracker, buffer:UOp) -> ShapeTracker|None:  # where a view lies, whatever moves led there
  return None if st.is_contiguous and prod(st.shape) == buffer.arg.size else st.bare  # (None: all of it, in order)
def _graph_then(graph:UOp, when:int) -> UOp:
  """graph as it was at tick `when`: where it reads a buffer written since, a value gone (a gradient that needs it, or
  flows into a trainable one, raises: see gradients). A write it reads is its value, wherever it is read."""
  def unwritten(u:UOp, new:UOp) -> UOp:
    if u.op is Ops.ASSIGN: return u
    if not u.in_memory or not isinstance(u.src[0].arg, Buffer) or u.src[0].arg.written <= when: return new
    return _unheld(u.dtype, u.arg, UNKNOWN if u.src[0] in trainable_nodes else REPLACED)
  return rebuild(graph, unwritten)
def note_writes(writes:dict[UOp, UOp], device:str):
  """The last write done (-> the view it wrote) into each tensor that isn't a parameter, of a value computed from one,
  noted on its buffer as a realized result is: gradients pass through it (a parameter's, an optimizer's step, is a
  leaf). Its value as the gradients see it: fixed when it was made (_value_seen)."""
  last = {view: write for write, view in writes.items()}  # (writes into one buffer run in order)
  for write in last.values():
    if _held_in(write) in trainable_nodes: continue
    if (value := write.__dict__.get("value_seen")) is not None: note_computed_from(writes[write], value, device)
    else: forget_computed_from(writes[write])  # (a value no gradient reaches: what it held before is gone)
def _value_seen(write:UOp, old:UOp, seen:bool) -> UOp|None:
  """A write's value as gradients see it, fixed when it is made (a later write changes what its buffer holds): its
  reads of realized results, the buffer it replaces among them (t *= v), made over what they were computed from
  (t = (x * 2).realize()); a read of the buffer it replaces holding no such result, over a copy of what it holds (b *=
  v: torch's saved tensor). An earlier write reads as its own value seen. A write through a detached view (not seen)
  is passed by, as torch's: the gradient goes to what the buffer held (old). None: it reads nothing trainable."""
  if not reading_trainable([write.src[1]] if seen else [write.src[1], old]): return None
  buffer = write.src[0].src[0]
  @functools.cache
  def kept() -> UOp:  # what the buffer holds now, copied (torch's saved tensor): a write may read it, once
    return Tensor._of(_flat(buffer), buffer.arg.device).clone().realize().uop
  def before(u:UOp, new:UOp) -> UOp:
    if u.op is Ops.ASSIGN:  # (its value seen; none: of a value no gradient reaches, into this buffer computed again)
      if "value_seen" in u.__dict__: return rebuild(_value_read(u), before)  # (its reads of this buffer too, again)
      if u.src[0].src[0] is not buffer: return u
      return new.src[1] if "realized" not in u.__dict__ else rebuild(u.src[1], before_it)
    if u.op is not Ops.VIEW or u.src[0] is not buffer: return _read_over_origin(u, new)
    if (read := _read_over_origin(u, None)) is not None: return read
    # (not a trainable tensor's own value, the leaf written; nor where a write pending into it makes now ambiguous)
    if _aliased(u) is not buffer or buffer in trainable_nodes or buffer.arg.pending is not None:
      return _unheld(u.dtype, u.arg, REPLACED)
    return _moved_over(u, kept())
  def before_it(u:UOp, new:UOp) -> UOp:  # (in a write into the buffer done before: what it read of the buffer is gone)
    return _unheld(u.dtype, u.arg, REPLACED) if u.op is Ops.VIEW and u.src[0] is buffer else before(u, new)
  value = rebuild(write.src[1], before)
  return value if seen else (was := rebuild(old, before)) + (value - was).detached()
def _read_over_origin(u:UOp, new:UOp) -> UOp:
  """A read of a realized result's buffer made over the graph it was computed from, where that holds still: a graph
  noted, or a write's value seen, so made stays true once the buffer is written (y = (t * 3).realize(); t *= v)."""
  if u.op is Ops.ASSIGN: return u  # (a write reads its own target: see gradients for how a write is read)
  if u.op is not Ops.VIEW or u.src[0].op is not Ops.BUFFER: return new
  if (found := origin(u.src[0], u.arg.history[0])) is None or _aliased(u) is not u.src[0]: return new
  if u.src[0].arg.written > found.when: return _unheld(u.dtype, u.arg, UNKNOWN)  # (it holds another value now)
  return _moved_over(u, _graph_then(found.graph, found.when))
def _value_read(u:UOp) -> UOp:  # a write read where its buffer may hold another value by then: its value, again
  value = u.__dict__.get("value_seen", u.src[1])
  return value if (done := u.__dict__.get("realized")) is None else _graph_then(value, done.when)
def _unheld(dtype:DType, st:ShapeTracker, what:Placeholder) -> UOp:  # a view of a value no buffer holds
  return UOp(Ops.VIEW, dtype, (UOp(Ops.BUFFER, dtype, (), what),), st)
def _computed_from(u:UOp, graph:UOp, when:int) -> UOp:  # a result realized at tick `when`: its graph then
  if u.op is Ops.VIEW and u.src[0].arg.written > when:
    raise RuntimeError("a gradient runs through a result written since it was realized (an assign, a TinyJit replay): "
                       f"it would be taken at new values. Compute it again ({u.shape})")
  return _graph_then(graph, when)
def origin_of(u:UOp) -> Origin|None: return origin(u.src[0], u.arg) if u.op is Ops.VIEW else None

def _grad_sources(u:UOp) -> tuple[UOp, ...]:
  """What u's gradient flows to: a view, the view its last move was applied to (a view no move made begins the
  graph); a realized result, the graph it was computed from; any other node, its sources."""
  # a write: to its value as gradients see it, as torch's in-place ops; a write done is a result realized from it, but
  # a parameter's (an optimizer's step) is its buffer, a leaf
  if u.op is Ops.ASSIGN:
    if (seen := u.__dict__.get("value_seen")) is None or (done := u.__dict__.get("realized")) is None:
      return () if seen is None else (seen,)
    return () if _held_in(u) in trainable_nodes else (_computed_from(u, seen, done.when),)
  if (found := origin_of(u)) is not None: return (_computed_from(u, found.graph, found.when),)
  if u.op is not Ops.VIEW: return u.src
  if (st := u.arg.before) is None: return ()  # a buffer's view, or a detached one
  # u's last move was applied to the node's own whole view: to the node itself (not a BUFFER: its tensor is its view)
  if st.move is None and u.src[0].op is not Ops.BUFFER: return (u.src[0],)
  return (UOp(Ops.VIEW, u.dtype, u.src, st),)  # to the view before the last move

# Two walks follow different sources: the gradient walk (_grad_sources, above) where a gradient flows; the walk that
# asks whether a graph reads a trainable tensor at all (_read_sources, for realize) everything a node reads.

# The nodes of tensors set to require grad. A view of a buffer is kept as its BUFFER: the walk back makes such views
# anew, but every graph that reads one holds the buffer.
trainable_nodes: weakref.WeakSet = weakref.WeakSet()
def make_trainable(t:Tensor):
  """Notes t's node as trainable. Equal graphs are one node (zeros(3); a * 2 built twice): a tensor that isn't a
  buffer's view gets a buffer of its own (its node changes), or its gradient would be the others' too; unless its
  graph reads a trainable tensor, whose gradient flows through it: a buffer of its own would cut that path."""
  if _held_in(t.uop).op is not Ops.BUFFER and not reading_trainable([t.uop]): t._into_buffer()
  trainable_nodes.add(_held_in(t.uop))
def _held_in(u:UOp) -> UOp:  # the BUFFER that a view of one, or an assign into a view of one, holds
  if u.op is Ops.ASSIGN: u = u.src[0]
  return u.src[0] if u.in_memory else u
def reading_trainable(roots:list[UOp]) -> set[UOp]:
  """The roots whose graphs read a tensor requiring grad: through their sources, and what a realized node was computed
  from, but not past a detached view. Each walk stops at the first it finds and builds no view its moves went
  through, so a model step's realize doesn't walk what made its weights."""
  clear: set[UOp] = set()  # nodes known to read none
  def reaches(root:UOp) -> bool:
    stack, seen = [root], set()
    while stack:
      if (u := stack.pop()) in seen or u in clear: continue
      if u.op is Ops.VIEW and u.arg.detached: continue
      if _held_in(u) in trainable_nodes: return True
      seen.add(u)
      stack += _read_sources(u)
    clear.update(seen)
    return False
  return {root for root in roots if reaches(root)} if trainable_nodes else set()
def _read_sources(u:UOp) -> tuple[UOp, ...]:
  """Its sources, what it was computed from, and for a view the nearest view its moves went through (a trainable
  tensor's node may be one): one that lives (found, not made), or the graph a realized one was computed from."""
  srcs = u.src if (found := origin_of(u)) is None else (*u.src, found.graph)
  st = u.arg.before if u.op is Ops.VIEW else None
  while st is not None:
    if (v := UOpMeta.existing(Ops.VIEW, u.dtype, u.src, st)) is not None: return (*srcs, v)
    if (found := origin(u.src[0], st)) is not None: return (*srcs, found.graph)
    st = st.before
  return srcs

def _grad_node(u:UOp) -> UOp:  # where a tensor's gradient arrives: a realized result's, its graph as the walk takes it
  return _computed_from(u, found.graph, found.when) if (found := origin_of(u)) is not None else u

def gradients(root:Tensor, seed:Tensor, targets:list[UOp]) -> tuple[dict[UOp, Tensor], set[str]]:
  """The gradients of the targets the root reaches through float ops, by the rules above in reverse topological order
  from the root's (seed); and the ops that stopped a gradient on its way to a target (an int source)."""
  sources_of = functools.cache(_grad_sources)  # (once a node: it may build a view)
  order = {u: sources_of(u) for u in postorder([root.uop], sources_of)}  # every node the gradients flow through
  # the nodes some target is reached through (the targets too, and a value gone that a target's may have been)
  on_path = set(targets) | {u for u in order if u.op is Ops.VIEW and u.src[0].arg == UNKNOWN}
  for u, sources in order.items():
    if any(s in on_path for s in sources): on_path.add(u)
  grads, stops = {root.uop: seed}, set()
  for u, sources in reversed(order.items()):
    if (g := grads.get(u)) is None or not any(s in on_path for s in sources): continue
    # a realized result: the values it was computed as (a copy: on their device)
    if (found := origin_of(u)) is not None: partials = (g.to(found.device).reshape(found.graph.shape),)
    elif (rule := derivatives.get(u.op)) is None: raise RuntimeError(f"{u.op.name} has no derivative rule ({u!r})")
    else: partials = rule(g, Tensor._of(u, g.device), *[Tensor._of(s, g.device) for s in sources])
    for s, d in zip(sources, partials):
      if s not in on_path or d is None: continue  # (d None: a where's condition, whose gradient is 0)
      if not dtypes.is_float(s.dtype): stops.add(u.op.name)
      else: grads[s] = grads[s] + d if s in grads else d
  if any(u.op is Ops.VIEW and u.src[0].arg == UNKNOWN for u in grads):
    raise RuntimeError("a gradient flows into a value written since it was read (an assign, an optimizer's step), "
                       "which nothing computes again: take the gradient before the write, or write a copy")
  found = [t for t in targets if t in grads]
  graphs = _reading_writes(UOp(Ops.SINK, None, tuple(grads[t].uop for t in found))).src
  return {t: Tensor._of(graph, grads[t].device) for t, graph in zip(found, graphs)}, stops

def _reading_writes(sink:UOp) -> UOp:
  """Gradients (a SINK's sources) that read each write in them as the value it writes, computed again, but where
  its buffer will hold that value: the write pending last into it, or one done that nothing wrote over since."""
  def in_buffer(u:UOp) -> bool:
    buffer = u.src[0].src[0].arg
    if (done := u.__dict__.get("realized")) is not None: return buffer.written <= done.when
    return buffer.pending is not None and buffer.pending.uop is u
  def read(u:UOp, new:UOp) -> UOp:  # (a write in its buffer is one to run, or run: what it reads is its own)
    if u.op is not Ops.ASSIGN: return new
    if in_buffer(u): return u
    return rebuild(_value_read(u), read)  # (read, a value gone raises: below)
  sink = rebuild(sink, read)
  # one that reads what a write replaces (t *= v: v's, t's old value) would read the new one, once the write runs
  # first: it raises, as torch's autograd does for a value modified in place
  def gone(u:UOp) -> bool: return u.op is Ops.BUFFER and (u.arg in (REPLACED, UNKNOWN) or u.arg.pending is not None)
  for graph in sink.src:
    if any(gone(u) for u in postorder([graph], lambda u: () if u.op is Ops.ASSIGN else u.src)):  # (a write reads after)
      raise RuntimeError(f"a gradient needs the values a write replaces ({graph.shape}): realize what it is "
                         "computed from before writing it in place, or write a copy")
  return sink

# ---------------------------------------------------------------------------------------------------------------------
# nn: optimizers, as tinygrad names them (`from tiny import nn`, then nn.optim.Adam). A step is assigns to the
# parameters and the optimizer's state: schedule_step() first realizes what reads their old values (the loss, the
# gradients), then gives them with their writes pending; step() realizes those too.

class Optimizer:
  def __init__(self, params:list[Tensor], lr:float):
    if lr < 0: raise ValueError(f"Invalid learning rate: {lr}")  # (tinygrad's errors, here and below)
    for t in params:
      if t.requires_grad is None: t.requires_grad = True  # a parameter not said otherwise is trained
    self.params = list(dict.fromkeys(t for t in params if t.requires_grad))  # (each once)
    if not self.params: raise AssertionError("optimizer must have at least one param")
    # a tensor, which TinyJit replays read (a float set in its place is a constant of the step), at least float32
    self.lr = Tensor([lr], dtypes.promote(dtypes.default_float, dtypes.float32), self.params[0].device)
  @property
  def state(self) -> list[Tensor]: return []  # what it keeps from step to step, assigned each step too
  def zero_grad(self):
    for t in self.params: t.grad = None
  def step(self): Tensor.realize(*self.schedule_step())
  def schedule_step(self) -> list[Tensor]:
    """The parameters and the state, each assigned its next value: to realize together (with the loss)."""
    for t in self.params:
      if t.grad is None: raise RuntimeError(f"{t!r} has no gradient: call backward() on a loss that depends on it")
    # what reads the parameters or the state now (the loss, the gradients) is realized first, while it reads their old
    # values: one pass for every buffer the step writes, as assign() would make for each. The next values are built in
    # _next, whose temporaries die when it returns: the writes below have no reader left to realize
    written = self.params + self.state
    for t in written: t.buffer()  # each in a buffer of its own (viewed, or the write that filled it)
    sharing = Tensor._realize_readers({t._written().src[0] for t in written}, *written)
    self._write_state()
    # (computed in at least float32, as the state is kept: a float16 gradient's square underflows)
    nexts = [self._next(i, t.detach(), t.grad.detach().cast(dtypes.promote(t.dtype, dtypes.float32)))
             for i, t in enumerate(self.params)]
    for t, new in zip(self.params, nexts): t._write(new, seen=None)
    Tensor._read_writes(sharing)
    return written
  def _write_state(self): pass  # the state that is the same for every parameter, written before _next reads it
  def _zeros(self) -> list[Tensor]:  # zeros in a buffer of their own per parameter, at least float32 (as tinygrad's)
    return [Tensor.zeros(*t.shape, dtype=dtypes.promote(t.dtype, dtypes.float32), device=t.device)._owned().realize()
            for t in self.params]
  def _stepped(self, p:Tensor, up:Tensor) -> Tensor:  # (lr of shape (1,), or a float: a 0-d parameter stays 0-d)
    return p - (self.lr * up).reshape(p.shape)

class SGD(Optimizer):
  """p -= lr * g, with g = grad + weight_decay * p; with momentum, b = momentum * b + g, and g = b (nesterov:
  g + momentum * b), as torch's SGD (dampening 0)."""
  def __init__(self, params:list[Tensor], lr=0.001, momentum=0.0, weight_decay=0.0, nesterov=False):
    if momentum < 0: raise ValueError(f"Invalid momentum value: {momentum}")
    if weight_decay < 0: raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    super().__init__(params, lr)
    self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
    self.b = self._zeros() if momentum else []  # each parameter's momentum buffer (tinygrad's name)
  @property
  def state(self) -> list[Tensor]: return self.b
  def _next(self, i:int, p:Tensor, g:Tensor) -> Tensor:
    if self.weight_decay: g = g + self.weight_decay * p
    if self.momentum:
      b = self.b[i]._write(self.momentum * self.b[i] + g, seen=None)
      g = g + self.momentum * b if self.nesterov else b
    return self._stepped(p, g)

class Adam(Optimizer):
  """Adam, as torch's: moments m and v of the gradients, corrected for their start at zero; weight_decay adds
  weight_decay * p to the gradient (L2). AdamW decouples it: p -= lr * weight_decay * p beside the update."""
  decoupled, trust = False, False  # decoupled: AdamW's weight decay; trust: LAMB's trust ratio
  def __init__(self, params:list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0):
    if weight_decay < 0: raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
    self.m, self.v = self._zeros(), self._zeros()
    # b1**step and b2**step, each in a buffer to assign into
    self.b1_t, self.b2_t = [Tensor([1.0], self.lr.dtype, self.lr.device) for _ in range(2)]
  @property
  def state(self) -> list[Tensor]: return self.m + self.v + [self.b1_t, self.b2_t]
  def _write_state(self):
    self.b1_t._write(self.b1_t * self.b1, seen=None)
    self.b2_t._write(self.b2_t * self.b2, seen=None)
  def _next(self, i:int, p:Tensor, g:Tensor) -> Tensor:
    if self.weight_decay and not self.decoupled: g = g + self.weight_decay * p
    m = self.m[i]._write(self.b1 * self.m[i] + (1 - self.b1) * g, seen=None)
    v = self.v[i]._write(self.b2 * self.v[i] + (1 - self.b2) * g * g, seen=None)
    up = (m / (1 - self.b1_t)) / ((v / (1 - self.b2_t)).sqrt() + self.eps)
    if self.decoupled: up = up + self.weight_decay * p
    if self.trust:  # LAMB's: |p| / |up|, 1 where either is 0
      p_norm, up_norm = p.square().sum().sqrt(), up.square().sum().sqrt()
      up = up * ((p_norm > 0) & (up_norm > 0)).where(p_norm / up_norm, 1.0)
    return self._stepped(p, up)

class AdamW(Adam):
  decoupled = True
  def __init__(self, params:list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
    super().__init__(params, lr, b1, b2, eps, weight_decay)

class LAMB(AdamW):
  """LAMB (You et al.): AdamW's step, scaled tensor by tensor by a trust ratio, the norm of the parameter over the
  norm of its step (adam=True: AdamW's step as it is)."""
  def __init__(self, params:list[Tensor], lr=0.001, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0, adam=False):
    super().__init__(params, lr, b1, b2, eps, weight_decay)
    self.trust = not adam

class OptimizerGroup(Optimizer):
  """Several optimizers stepped as one (tinygrad's): each its own parameters."""
  def __init__(self, *optimizers:Optimizer): self.optimizers = optimizers  # (no learning rate of its own)
  def __getitem__(self, i:int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self):
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o.schedule_step()]

# Layers: thin wrappers over Tensor methods, with tinygrad's parameter names and initialization, so that state dict keys
# match tinygrad's (and torch's)

def parameter(t:Tensor) -> Tensor:  # a layer's parameter, in a buffer of its own: it requires grad
  t = t._owned()
  t.requires_grad = True
  return t

def _affine(shape, on:bool) -> tuple[Tensor|None, Tensor|None]:  # a norm's weight (ones) and bias (zeros), or none
  return (parameter(Tensor.ones(shape)), parameter(Tensor.zeros(shape))) if on else (None, None)

class Linear:
  def __init__(self, in_features:int, out_features:int, bias=True):
    bound = 1 / math.sqrt(in_features)
    self.weight = parameter(Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5)))
    self.bias = parameter(Tensor.uniform(out_features, low=-bound, high=bound)) if bias else None
  def __call__(self, x:Tensor) -> Tensor: return x.linear(self.weight.T, self.bias)

class Conv2d:
  def __init__(self, in_channels:int, out_channels:int, kernel_size, stride=1, padding=0, dilation=1, groups=1,
               bias=True):
    self.kernel_size = per_dim(kernel_size, 2)
    if isinstance(padding, str):  # "same": an output of the input's size, as tinygrad's (stride 1)
      if padding != "same" or stride != 1: raise ValueError(f"padding {padding!r}: only 'same', of stride 1, is a word")
      spans = [d * (k - 1) for d, k in zip(per_dim(dilation, len(self.kernel_size)), self.kernel_size)][::-1]
      padding = [p for span in spans for p in (span // 2, span - span // 2)]  # (flat, the last dim's first)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    shape = (out_channels, in_channels // groups, *self.kernel_size)
    self.weight = parameter(Tensor.kaiming_uniform(*shape, a=math.sqrt(5)))
    bound = 1 / math.sqrt(prod(self.weight.shape[1:]))
    self.bias = parameter(Tensor.uniform(out_channels, low=-bound, high=bound)) if bias else None
  def __call__(self, x:Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)

def Conv1d(in_channels:int, out_channels:int, kernel_size:int, stride=1, padding=0, dilation=1, groups=1, bias=True):
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)  # (one dim)

class ConvTranspose2d(Conv2d):  # its weight: (in, out // groups, *kernel), as torch's
  def __init__(self, in_channels:int, out_channels:int, kernel_size, stride=1, padding=0, output_padding=0, dilation=1,
               groups=1, bias=True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    # (Conv2d's weight, (out, in // groups, ...), is replaced by one of this shape, its bound by in_channels)
    bound = 1 / math.sqrt(in_channels * prod(self.kernel_size))
    self.weight = parameter(Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-bound,
                                           high=bound))
    self.output_padding = output_padding
  def __call__(self, x:Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,
                              self.output_padding)

def ConvTranspose1d(in_channels:int, out_channels:int, kernel_size:int, stride=1, padding=0, output_padding=0,
                    dilation=1, groups=1, bias=True) -> ConvTranspose2d:
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups,
                         bias)

class GroupNorm:
  """Each group of a sample's channels (axis 1) to mean 0 and variance 1, then each channel scaled and shifted."""
  def __init__(self, num_groups:int, num_channels:int, eps=1e-5, affine=True):
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight, self.bias = _affine(num_channels, affine)
  def __call__(self, x:Tensor) -> Tensor:
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    channels = (1, -1, *(1,) * (x.ndim - 2))
    return x if self.weight is None else x * self.weight.reshape(channels) + self.bias.reshape(channels)

class InstanceNorm(GroupNorm):  # each channel of each sample alone: a group per channel
  def __init__(self, num_features:int, eps=1e-5, affine=True):
    super().__init__(num_features, num_features, eps, affine)
    self.num_features = num_features

class RMSNorm:  # each row divided by its root mean square (computed in float32), then scaled
  def __init__(self, dim:int, eps=1e-6, elementwise_affine=True):
    self.eps = eps
    self.weight = parameter(Tensor.ones(dim)) if elementwise_affine else None
  def __call__(self, x:Tensor) -> Tensor:
    y = x.float()
    y = (y * (y.square().mean(-1, keepdim=True) + self.eps).rsqrt()).cast(x.dtype)
    return y if self.weight is None else y * self.weight

class LayerNorm:
  def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight, self.bias = _affine(self.normalized_shape, elementwise_affine)
  def __call__(self, x:Tensor) -> Tensor:
    x = x.layernorm(self.axis, self.eps)
    return x if self.weight is None else x * self.weight + self.bias

class LayerNorm2d(LayerNorm):  # over the channels (axis 1) of each pixel of an image
  def __call__(self, x:Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class BatchNorm:
  """Normalizes each channel (axis 1) by the batch's statistics in Tensor.train(), and by the running ones kept from
  them (momentum: how much a batch moves them; the variance unbiased) outside it."""
  def __init__(self, sz:int, eps=1e-5, affine=True, track_running_stats=True, momentum=0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight, self.bias = _affine(sz, affine)
    # state, not parameters: an optimizer given them leaves them (num_batches_tracked always: tinygrad's state dict)
    self.num_batches_tracked = Tensor.zeros(dtype=dtypes.long, requires_grad=False)
    if track_running_stats:
      self.running_mean, self.running_var = Tensor.zeros(sz, requires_grad=False), Tensor.ones(sz, requires_grad=False)
  def __call__(self, x:Tensor) -> Tensor:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    if self.track_running_stats and not Tensor._training(): mean, var = self.running_mean, self.running_var
    else:
      mean = x.mean(axes)
      # (the mean detached: var's gradient through it is a sum of x - mean, 0)
      var = (x - mean.detach().reshape(1, -1, *(1,) * (x.ndim - 2))).square().mean(axes)
      if self.track_running_stats and Tensor._training():
        n = x.numel() / x.shape[1]
        if n < 2: raise ValueError(f"a batch norm in training needs more than 1 value per channel, got shape {x.shape}")
        self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
        self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * n / (n - 1) * var.detach())
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())

class Embedding:
  def __init__(self, vocab_size:int, embed_size:int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = parameter(Tensor.glorot_uniform(vocab_size, embed_size))
  def __call__(self, idx:Tensor) -> Tensor:  # (an index out of range, -1 too, gives zeros, as tinygrad's)
    return self.weight[(idx < 0).where(self.vocab_sz, idx)]

class LSTMCell:
  def __init__(self, input_size:int, hidden_size:int, bias=True):
    bound = 1 / math.sqrt(hidden_size)
    self.weight_ih = parameter(Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound))
    self.weight_hh = parameter(Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound))
    self.bias_ih, self.bias_hh = (parameter(Tensor.zeros(hidden_size * 4)) if bias else None for _ in range(2))
  def __call__(self, x:Tensor, hc:tuple[Tensor, Tensor]|None=None) -> tuple[Tensor, Tensor]:
    """One step: the hidden and cell states after x (batch, input_size), from the last ones (or zeros)."""
    h, c = hc or (Tensor.zeros(x.shape[0], self.weight_hh.shape[1], dtype=x.dtype, device=x.device),) * 2
    gates = x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=1)  # input, forget, cell and output gates
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c

# ---------------------------------------------------------------------------------------------------------------------
# Weights on disk: a model's tensors by name, and safetensors files: an 8-byte little-endian header length, a JSON
# header of each tensor's dtype, shape and byte offsets in the data, then the data, little-endian.

def get_state_dict(obj, prefix:str="") -> dict[str, Tensor]:
  """Every tensor an object holds, by its path of attribute names, list indices and dict keys: "l1.weight"."""
  if isinstance(obj, Tensor): return {prefix.strip("."): obj}
  if hasattr(obj, "_asdict"): obj = obj._asdict()  # a named tuple
  elif hasattr(obj, "__dict__") and not isinstance(obj, type): obj = obj.__dict__
  if isinstance(obj, dict): items = obj.items()
  else: items = enumerate(obj) if isinstance(obj, (list, tuple)) else ()
  return {k: v for key, item in items for k, v in get_state_dict(item, f"{prefix}{key}.").items()}

def get_parameters(obj) -> list[Tensor]: return list(get_state_dict(obj).values())

def load_state_dict(model, state_dict:dict[str, Tensor], strict=True, verbose=True, consume=False,
                    realize=True) -> list[Tensor]:
  """Assigns each tensor of the model the one of its name (a missing one raises, unless not strict); realizes them
  (unless not realize) and returns them. consume: each one assigned is dropped from state_dict. (verbose: tinygrad's
  progress bar; tiny prints none.)"""
  loaded = []
  for name, t in get_state_dict(model).items():
    if name not in state_dict:
      if strict: raise KeyError(f"{name!r} is not in the state dict (it has {', '.join(state_dict) or 'nothing'})")
      continue
    value = state_dict[name]
    if {value.shape, t.shape} == {(), (1,)}: value = value.reshape(t.shape)  # (a 0-d tensor saved as (1,), as tinygrad)
    if value.shape != t.shape:
      raise ShapeError(f"{name!r} is {value.shape} in the state dict, but {t.shape} in the model")
    if consume: del state_dict[name]
    loaded.append(t.assign(value.to(t.device)))
  if realize and loaded: Tensor.realize(*loaded)
  return loaded

SAFETENSORS_DTYPES = {"BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16,
                      "U16": dtypes.uint16, "U32": dtypes.uint32, "U64": dtypes.uint64, "I32": dtypes.int32,
                      "I64": dtypes.int64, "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32,
                      "F64": dtypes.float64}

def safe_save(tensors:dict[str, Tensor], path, metadata:dict[str, str]|None=None) -> None:
  header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
  names, at = {d: n for n, d in SAFETENSORS_DTYPES.items()}, 0
  for name, t in tensors.items():
    header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + t.nbytes()]}
    at += t.nbytes()
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for t in tensors.values(): f.write(t.contiguous().buffer().copyout())

def safe_load(path, device:str|None=None) -> dict[str, Tensor]:
  """The tensors of a safetensors file. A file that doesn't hold what its header says raises a ValueError naming why."""
  with open(path, "rb") as f: raw = f.read()
  if len(raw) < 8: raise ValueError(f"{path}: not a safetensors file: too short to hold its header length")
  if (size := struct.unpack("<Q", raw[:8])[0]) > len(raw) - 8:
    raise ValueError(f"{path}: not a safetensors file: its header length is past the end of the file")
  try: header = json.loads(raw[8:8 + size])
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: its header is not JSON ({e})") from None
  if not isinstance(header, dict): raise ValueError(f"{path}: its header is not a JSON object of tensors")
  data, out = memoryview(raw)[8 + size:], {}
  for name, info in header.items():
    if name == "__metadata__": continue
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
      raise ValueError(f"{path}: {name!r} is {info!r}, not a dtype, shape and data_offsets")
    if info["dtype"] not in SAFETENSORS_DTYPES:
      raise ValueError(f"{path}: {name!r} has dtype {info['dtype']!r}, not one of {', '.join(SAFETENSORS_DTYPES)}")
    malformed = ValueError(f"{path}: {name!r} has shape {info['shape']!r}, offsets {info['data_offsets']!r}")
    try:
      dtype, shape = SAFETENSORS_DTYPES[info["dtype"]], check_shape(tuple(info["shape"]))
      start, end = info["data_offsets"]
    except (TypeError, ValueError): raise malformed from None  # (a ShapeError is a ValueError)
    if any(type(n) is not int for n in (*info["shape"], start, end)): raise malformed  # (JSON's true is no size)
    if not 0 <= start <= end <= len(data) or end - start != prod(shape) * dtype.itemsize:
      raise ValueError(f"{path}: {name!r} at bytes {start} to {end} of {len(data)}: not its {shape} {dtype.name}s")
    out[name] = Tensor.empty(*shape, dtype=dtype, device=device)
    out[name].buffer().copyin(data[start:end])
  return out

def _namespace(*named, **more) -> types.SimpleNamespace:  # each object by its own name, and more by the names given
  return types.SimpleNamespace(**{f.__name__: f for f in named}, **more)
nn = _namespace(Linear, Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, LayerNorm, LayerNorm2d, GroupNorm,
                InstanceNorm, RMSNorm, BatchNorm, Embedding, LSTMCell, BatchNorm2d=BatchNorm, BatchNorm3d=BatchNorm,
                optim=_namespace(Optimizer, SGD, Adam, AdamW, LAMB, OptimizerGroup),
                state=_namespace(get_state_dict, get_parameters, load_state_dict, safe_save, safe_load))

# ---------------------------------------------------------------------------------------------------------------------
# Scheduler: tensor graph -> kernels, in the steps plan() lists. A node becomes a buffer (a kernel output) when it is
# asked for (realized, contiguous(), an assign), or computing it again in each reader would cost more than storing it
# (a reduce read by several, a costly value read through a broadcast: kernel_outputs lists the rules); everything else
# fuses into its readers. Each kernel's AST is a SINK of STOREs over PARAMs.

@dataclass
class Kernel:
  """One kernel of a plan, over slots."""
  ast: UOp          # SINK of STOREs over PARAMs: equal for graphs of equal structure, so lowering is cached
  bufs: list[UOp]   # outputs first, then inputs, in PARAM order: Slot BUFFERs
  outs: dict        # the entry of each node it computes -> the view of the slot that holds it
  why: str          # why its outputs are stored (kernel_outputs' words), for DEBUG=2

@dataclass
class ScheduleItem:
  """A plan's kernel bound to one graph's buffers: to show it, or to run it with run_schedule."""
  ast: UOp
  bufs: list[Buffer]  # outputs first, then inputs, in PARAM order
  outs: dict          # computed node -> the view of the buffer that holds it once this has run
  why: str

def schedule(tensors:list[Tensor]) -> list[ScheduleItem]:
  """The kernels that realize these tensors (on one device), in the order they run: their structure's plan, bound to
  this graph's buffers and new ones (allocated when used). realize() runs the plan itself."""
  device = tensors[0].device
  key, buffers, nodes = structure([t.uop for t in tensors], device)
  plan = planned(key, nodes)
  bufs = buffers + [Buffer(device, size, dtype) for size, dtype in plan.new_slots]
  return [ScheduleItem(item.ast, [bufs[b.arg.index] for b in item.bufs],
                       {nodes[r]: v.rebind(bufs[v.src[0].arg.index]) for r, v in item.outs.items()}, item.why)
          for item in plan.items]

class Slot(NamedTuple):  # a BUFFER's arg in a planned graph: where the buffer it stands for is bound
  index: int
  size: int

class Computed(NamedTuple):  # an entry of a structure: a node computed from earlier entries
  op: Ops
  dtype: DType
  arg: Any  # as a key: -0.0, 0.0 and nan apart
  srcs: tuple[int, ...]

class Read(NamedTuple):  # an entry of a structure: a view of one of the graph's buffers, read from memory
  dtype: DType
  slot: int  # which buffer: the walk numbers them in the order it meets them
  size: int
  view: ShapeTracker

class Structure(NamedTuple):  # what a plan is made for, and found by
  device: str
  entries: tuple[Computed|Read, ...]
  roots: tuple[int, ...]

def structure(roots:list[UOp], device:str) -> tuple[Structure, list[Buffer], list[UOp]]:
  """The graph as a plan sees it, in one walk that builds no nodes: an entry for each node, its sources by entry number.
  A result realized before is read from its buffer (the walk stops there). Graphs of one structure have equal entries,
  whatever buffers they hold. Also returned: the buffers by slot, and the nodes by entry."""
  slots: dict[Buffer, int] = {}
  entries, nodes, entry_of = [], [], {}  # entry_of: node -> its entry number
  stack = [(r, False) for r in roots]  # (node, whether its sources have entries)
  while stack:
    u, ready = stack.pop()
    if u in entry_of: continue
    if ready:
      arg = u.arg.bare if u.op is Ops.VIEW else u.arg  # (a view's arg without the moves that made it)
      entries.append(Computed(u.op, u.dtype, arg_key(arg), tuple(map(entry_of.__getitem__, u.src))))
    else:
      # (u.in_memory written out: this runs per node of every realize, where the property's call cost 2% of a step)
      view = u if u.op is Ops.VIEW and u.src[0].op is Ops.BUFFER else realized_view(u)
      if view is None:  # computed: its sources first
        stack += [(u, True)] + [(s, False) for s in u.src]
        continue
      b = view.src[0].arg
      entries.append(Read(view.dtype, slots.setdefault(b, len(slots)), b.size, view.arg.bare))
    entry_of[u] = len(nodes)
    nodes.append(u)
  return Structure(device, tuple(entries), tuple(entry_of[r] for r in roots)), list(slots), nodes

@dataclass
class Plan:
  """The kernels of every graph of one structure (its ops, shapes, dtypes, constants, and which of its buffers are the
  same), over slots: the graph's own buffers, then one for each node a run stores. A constant is part of the
  structure: a new value is a new kernel, compiled once."""
  items: list[Kernel]                 # the kernels, in the order they run
  new_slots: list[tuple[int, DType]]  # each slot a run makes, after the graph's own: its size and dtype
  root_views: list[UOp|None]          # the view of the slot that holds each root; None: read from memory already
  writes: dict[int, UOp]              # each assign's entry -> the view it writes: realize() notes it done, as the roots
  programs: dict[tuple[int, int], list[Launch]] = field(default_factory=dict)  # (NOOPT, BEAM) -> its kernels lowered
  def run(self, buffers:list[Buffer], device:str) -> list[Buffer]:
    """Launches the kernels on a graph's own buffers and new ones it makes: all of them, by slot."""
    made = [Buffer(device, size, dtype) for size, dtype in self.new_slots]
    if capturing.now is not None: capturing.now.made.update(made)
    bufs = buffers + made
    settings = (getenv("NOOPT"), getenv("BEAM"))
    if settings not in self.programs:
      self.programs[settings] = prepare(self.items, device, lambda b: b.arg.index)  # a slot BUFFER -> its slot
    launch(with_programs(self.programs[settings], device), bufs)
    return bufs

plans: Bounded = Bounded()  # structure -> its plan

def planned(key:Structure, nodes:list[UOp]) -> Plan:
  """The plan of this structure (these nodes have it), made once."""
  if (found := plans.get(key)) is None: found = plans[key] = plan(key, nodes)
  return found

def plan(key:Structure, nodes:list[UOp]) -> Plan:
  """The kernels for every graph of this structure (these nodes have it), in steps: the graph over slots (the graph's
  own buffers), its big reduces split and its matmuls' b packed, the nodes stored and what each kernel reads, a slot
  for each stored node after the graph's own, the kernels. What each kernel stores is named by its entry."""
  slotted = over_slots(key, nodes)  # a node for each entry
  sink = UOp(Ops.SINK, None, tuple(slotted[i] for i in key.roots))
  # each node of the graph -> the node it is after its reduces are split and packed (kept: entries index the nodes
  # before, and kernels name what they store by entry)
  became: dict[UOp, UOp] = {}
  def split_and_pack(u:UOp, new:UOp) -> UOp:
    became[u] = pack(split_reduce(new, key.device), key.device) if u.op is Ops.REDUCE_AXIS else new
    return became[u]
  split = rebuild(sink, split_and_pack)
  reasons, has_reduce = kernel_outputs(split)  # the nodes stored, each with why
  inputs_of = kernel_inputs(split, reasons)  # each stored node -> what its kernel reads
  first_new = len({r.slot for r in key.entries if isinstance(r, Read)})  # (the graph's own buffers come first)
  new_outputs = [u for u in inputs_of if u.op is not Ops.ASSIGN]  # an assign is stored in the buffer it writes
  views = {u: UOp(Ops.VIEW, u.dtype, (UOp(Ops.BUFFER, u.dtype, (), Slot(first_new + i, prod(u.shape))),),
                  ShapeTracker.contiguous(u.shape)) for i, u in enumerate(new_outputs)}
  views |= {u: u.src[0] for u in inputs_of if u.op is Ops.ASSIGN}
  entry_of = {became[u]: i for i, u in enumerate(slotted)}  # (split and packed) node -> its entry
  items = [_kernel(g, views, reasons, entry_of) for g in group_outputs(inputs_of, has_reduce)]
  stored_at = {r: view for item in items for r, view in item.outs.items()}  # entry -> the slot view that holds it
  # (two entries can be one node over slots: views of one buffer built by other moves, a.T and a.T.detach(); a root
  # finds its view by its node)
  node_at = {became[slotted[r]]: view for r, view in stored_at.items()}
  return Plan(items, new_slots=[(prod(u.shape), u.dtype) for u in new_outputs],
              root_views=[node_at.get(became[slotted[r]]) for r in key.roots],
              writes={r: view for r, view in stored_at.items() if slotted[r].op is Ops.ASSIGN})

def over_slots(key:Structure, nodes:list[UOp]) -> list[UOp]:  # a node for each entry, reading buffers as slots
  graph: list[UOp] = []
  for r, u in zip(key.entries, nodes):
    if isinstance(r, Read): graph.append(UOp(Ops.VIEW, r.dtype, (UOp(Ops.BUFFER, r.dtype, (), Slot(r.slot, r.size)),),
                                             r.view))
    elif u.op is Ops.POW: graph.append(graph[r.srcs[-1]])  # its value: kernels compute that
    else: graph.append(UOp(u.op, u.dtype, tuple(graph[i] for i in r.srcs), u.arg.bare if u.op is Ops.VIEW else u.arg))
  return graph

# A computed node, once realized, keeps a weak reference to the buffer view holding its value: the result lives as long
# as a tensor (or graph) holds that view, and the note as long as the node, until a buffer it reads or the one holding
# its value is written (or has a write pending). An assign's note holds its view: it says the write ran, which stays
# true, and a tensor still holding the assign must not run it again (its buffer is held by the assign anyway).
ticks = itertools.count(1)  # orders buffers' writes and the notes below: a note older than a write it reads is stale
class Realized(NamedTuple):
  view: Callable[[], UOp|None]  # the view of the buffer holding the node's value (a weak reference, but an assign's)
  when: int                     # the tick when it was computed
def last_write(u:UOp) -> int: return max((b.arg.written for b in u.buffers), default=0)  # into what u reads
# In a TinyJit's capture a node counts as computed only if the capture computed it: one computed before, from other
# inputs, is computed again, so the replay computes it from its own. An assign done before stays its buffer (done
# again, it would write twice).
def realized_view(u:UOp) -> UOp|None:
  if (note := u.__dict__.get("realized")) is None or (view := note.view()) is None: return None
  if u.op is not Ops.ASSIGN and max(last_write(u), view.src[0].arg.written) > note.when: return None  # (stale)
  if capturing.now is not None and u not in capturing.now.computed and u.op is not Ops.ASSIGN: return None
  return view
def remember(u:UOp, view:UOp) -> UOp:
  u.__dict__["realized"] = Realized((lambda: view) if u.op is Ops.ASSIGN else weakref.ref(view), next(ticks))
  if capturing.now is not None: capturing.now.computed.add(u)
  return view
def unrealized(u:UOp) -> UOp:  # u still to compute, though an equal node was realized before and is still held
  u.__dict__.pop("realized", None)
  return u

def _flat(buffer:UOp) -> UOp:  # all of a BUFFER node, as one row
  return UOp(Ops.VIEW, buffer.dtype, (buffer,), ShapeTracker.contiguous((buffer.arg.size,)))
def _whole_buffer(u:UOp) -> bool: return u.in_memory and u.arg.is_contiguous and u.src[0].arg.size == prod(u.shape)
def _whole_view_of(u:UOp) -> UOp|None:  # the BUFFER u is all of, as it lies: a view of it, or a write into it
  if u.op is Ops.ASSIGN: u = u.src[0]
  elif u.op is Ops.VIEW and u.src[0].op is Ops.ASSIGN and u.arg.is_contiguous and prod(u.shape) == prod(u.src[0].shape):
    u = u.src[0].src[0]
  return u.src[0] if _whole_buffer(u) else None
def _aliased(u:UOp) -> UOp|None:
  """The BUFFER a view reads, directly or through a write into all of it, where the view's moves begin from all of
  it: a write into the buffer shows through the same moves."""
  if u.op is not Ops.VIEW: return None
  if (source := u.src[0]).op is Ops.ASSIGN: source = source.src[0].src[0]
  start, _ = u.arg.path
  return source if source.op is Ops.BUFFER and start.is_contiguous and prod(start.shape) == source.arg.size else None
def _moved_over(view:UOp, whole:UOp) -> UOp:  # view's moves made again over whole (all of the buffer it views)
  start, moves = view.arg.path
  if start.move is not None: whole = whole.detached()  # (the one move a tracker may begin with)
  whole = whole.moved(("reshape", start.shape))
  for move in moves: whole = whole.detached() if move.name == "detach" else whole.moved(move)
  return whole
def _made_from(view:UOp, old:UOp, new:UOp) -> UOp|None:
  """view, made by moves from the node old, made by the same moves from new instead; None where it wasn't made from
  old (so _made_from(view, old, old) is not None asks whether it was)."""
  if view.src[0] is old: return _moved_over(view, new)
  if view.src[0].op is Ops.VIEW and (inner := _made_from(view.src[0], old, new)) is not None:
    return _moved_over(view, inner)  # (a detach of a graph's view: its source is that view)
  if old.op is Ops.VIEW and view.src[0] is old.src[0] and (moves := view.arg.since(old.arg)) is not None:
    return new.moved(*moves)  # (old a view itself, as a constant's: view's tracker goes on from old's)
  return None
def _broadcasts(u:UOp) -> bool:  # a view that reads an element more than once (a stride 0)
  return u.op is Ops.VIEW and any(d == 0 and s > 1 for v in u.arg.views for s, d in zip(v.shape, v.strides))

BIG_REDUCE = 2**15  # elements from which a reduction to few outputs splits in two kernels

def split_reduce(r:UOp, device:str) -> UOp:
  """A big reduction to few outputs runs as two kernels, partial results and then their combine (one kernel would be
  one block of threads: a sliver of a GPU). Each output gets about 256 parts (on a GPU, one per 4096 elements, up to
  4096: a block each, enough to fill every SM), each a contiguous chunk whose length is a multiple of a unit: 4, 2 or
  1 of the device's vectors, else 4 elements (vector loads, unrolled). A size no split divides is padded with the
  reduction's identity (which gates every load: no vectors)."""
  op, axes, x = r.arg.op, r.arg.axes, r.src[0]
  size, kept = prod(x.shape[i] for i in axes), tuple(s for i, s in enumerate(x.shape) if i not in axes)
  if size < BIG_REDUCE or prod(kept) >= 256: return r  # (256 outputs or more: a block each fills a GPU's SMs)
  order = tuple(i for i in range(len(x.shape)) if i not in axes) + tuple(axes)
  x = x.moved(("permute", order), ("reshape", kept + (size,)))
  target = Device.target(device)
  w = target.width
  most_parts = min(4096, max(256, size // 4096)) if target.gpu else 256
  # (unit, parts): a unit of vectors, widest first, and parts from most_parts down to a quarter of it, that divide size
  splits = [(u, p) for u in (4 * w, 2 * w, w, 4) for p in range(most_parts, most_parts // 4 - 1, -1)
            if size % (u * p) == 0]
  # on a CPU, parts its cores share evenly first: thread_opts splits the parts across them only in whole chunks
  fallback = splits[0] if splits else (4 * w, most_parts)  # (no split divides the size: padded below)
  unit, parts = next(((u, p) for u, p in splits if p % target.cores == 0), fallback)
  x = _padded(x, ((0, 0),) * len(kept) + ((0, -size % (unit * parts)),), identity(op, x.dtype))
  partial = UOp(Ops.REDUCE_AXIS, x.dtype, (x.moved(("reshape", kept + (parts, x.shape[-1] // parts))),),
                Reduction(op, (len(kept) + 1,)))
  total = UOp(Ops.REDUCE_AXIS, x.dtype, (UOp(Ops.CONTIGUOUS, x.dtype, (partial,)),), Reduction(op, (len(kept),)))
  return total.moved(("reshape", r.shape))

def _padded(x:UOp, grow:tuple, value:UOp) -> UOp:  # x padded, the padding holding value (a pad's own holds 0)
  padded = x.moved(("pad", grow))
  if value.arg == 0: return padded
  ones = (1,) * len(x.shape)
  inside = UOp.const(dtypes.bool, True).moved(("reshape", ones), ("expand", x.shape), ("pad", grow))
  return inside.where(padded, value.moved(("reshape", ones), ("expand", padded.shape)))

def pack(r:UOp, device:str) -> UOp:
  """A CPU matmul's tile reads 4 vectors of b's columns for each step of its reduce: a row of b a step, a page apart
  once rows pass 4 KB, so each step misses the TLB; and a b read transposed (x @ w.T) has no columns side by side to
  load as vectors at all. b stored first in tiles of those columns, (N/T, K, T), is read in order (a 1024 matmul:
  1.5x; x @ w.T of 512: 1.3x). Only for a b broadcast over 32 output rows or more, with a reduce of 64 or more: the
  copy is made on every call, and fewer rows or a short reduce don't pay for it (one row: 2-3x slower). A b read
  transposed wants 256 rows: fewer are summed as well along the rows of both, in vectors (see lanes_and_tiles), and
  its copy is a transpose (64 x 784 @ w.T of 256 rows: 1.5x faster unpacked; 32 x 1024 @ w.T of 1024: 3.4x)."""
  target = Device.target(device)
  x = r.src[0]
  sum_of_products = r.op is Ops.REDUCE_AXIS and r.arg.op is Ops.ADD and x.op is Ops.MUL
  if target.gpu or not sum_of_products or len(x.shape) < 3 or tuple(r.arg.axes) != (len(x.shape) - 1,): return r
  tile = 4 * target.width
  def packed(b:UOp) -> UOp:
    if b.op is not Ops.VIEW or b.src[0].op not in (Ops.BUFFER, Ops.CONTIGUOUS) or len(b.arg.views) != 1: return b
    v = b.arg.views[0]
    (n, k), (n_stride, k_stride) = v.shape[-2:], v.strides[-2:]
    transposed = n_stride != 1  # (its columns not side by side)
    read_well = not transposed and k_stride * b.dtype.itemsize < 4096  # its columns side by side, rows in a page
    few_rows = prod(v.shape[:-2]) < (256 if transposed else 32)
    if v.mask is not None or any(v.strides[:-2]) or few_rows or n % tile or k < 64 or read_well: return b
    # (a b about to be stored, contiguous(), is stored in tiles instead: a conv's im2col windows, 1.3x)
    base = b.src[0].src[0] if b.src[0].op is Ops.CONTIGUOUS else b.src[0]
    columns = UOp(Ops.VIEW, b.dtype, (base,), ShapeTracker((View((n, k), (n_stride, k_stride), v.offset),)))
    tiles = UOp(Ops.CONTIGUOUS, b.dtype, (columns.moved(("reshape", (n // tile, tile, k)), ("permute", (0, 2, 1))),))
    # stored as (N/T, K, T), read back in b's own order: the matmul sees b as it was
    return tiles.moved(("permute", (0, 2, 1)), ("reshape", (1,) * (len(v.shape) - 2) + (n, k)), ("expand", v.shape))
  srcs = tuple(packed(b) for b in x.src)
  return r if srcs == x.src else r.replace(src=(x.replace(src=srcs),))

# What one element of an op costs, in about one instruction: transcendentals and divisions are costly, other ALU ops 1,
# views and loads nothing. A rough weight for the scheduler, the same for every device: an exp2 is about 35 operations
# on a CPU (see approximations), one instruction on a GPU; 16 lies between. Writing an element and reading it back
# costs STORE_COST: memory moves a float in about the time the cores do 30 operations on it.
alu_costs = {Ops.EXP2: 16, Ops.LOG2: 16, Ops.SIN: 16, Ops.SQRT: 4, Ops.RECIP: 4, Ops.FDIV: 4, Ops.IDIV: 4, Ops.MOD: 4}
STORE_COST = 32
LAUNCH_COST = 2**14  # a kernel launch: a few microseconds, the time the cores do about this many operations

class Fused(NamedTuple):  # what kernel_outputs knows of a node, with the sources it fuses (those not stored)
  reduce: bool            # a reduce is among them
  pending: bool           # a reduce not broadcast back yet (see _pending)
  row_shape: tuple|None   # where that is one row reduce (over the last axes), the shape of its rows
  cost: int               # of one element
  row_reduces: frozenset  # the row reduces kept in its kernel

def kernel_outputs(sink:UOp) -> tuple[dict[UOp, str], dict[UOp, bool]]:
  """The nodes stored to memory, each with why: "output", "contiguous", "assign" (asked for), "assigned from its own
  buffer moved" (an assign's value reads the buffer it writes through a moving view); "reduce": a reduce otherwise
  recomputed (read by several, broadcast, or reduced again); "dear": costing more to recompute per copy than to store
  (read through a broadcast: exp(x) in x.exp() @ w, once per output column). A row reduce (over the last axes)
  broadcast back over its own rows stays in its consumer: a softmax row's max, sum and outputs are one kernel, the row
  read again from cache (see row_loops). Unless a later reduce over other axes holds it (x.softmax(-1).sum(0), which
  would compute the row again per output: stored, and the walk runs again), or several elementwise readers would each
  reduce its rows again for more than a launch costs (a loss's max and sum, read by the loss and its gradient, cost
  less). Also returned: for each node, whether its kernel holds a reduce."""
  order = sink.toposort
  place = {u: i for i, u in enumerate(order)}
  consumers: dict[UOp, list[UOp]] = defaultdict(list)
  for u in order:
    for s in dict.fromkeys(u.src): consumers[s].append(u)  # s*s reads s once
  asked: dict[UOp, str] = {u: "contiguous" for u in order if u.op is Ops.CONTIGUOUS}
  asked |= {u: "assign" for u in order if u.op is Ops.ASSIGN}
  asked |= {u.src[1]: "assigned from its own buffer moved" for u in order if u.op is Ops.ASSIGN and _reads_moved(u)}
  asked |= {u: "output" for u in sink.src if not _whole_buffer(u)}
  # aranges and what is computed from them alone, which lowering folds into index math (free), and an element
  # compared with an arange (summed, that is a pick: see picked)
  index_math: set[UOp] = set()
  for u in order:
    from_aranges = bool(u.src) and all(s in index_math for s in u.src) and u.op in GroupOp.Pointwise
    compared = u.op is Ops.CMPEQ and any(s in index_math for s in u.src)
    if u.op in (Ops.IOTA, Ops.CONST) or from_aranges or compared: index_math.add(u)
  while True:
    stored, fused, store_next = dict(asked), {}, {}
    for u in order:
      srcs = [fused[s] for s in u.src if s not in stored]
      own = alu_costs.get(u.op, 1) if u.op in GroupOp.ALU and u not in index_math else 0  # (index math is free)
      pending, row_shape = _pending(u, srcs)
      f = fused[u] = Fused(reduce=u.op is Ops.REDUCE_AXIS or any(s.reduce for s in srcs), pending=pending,
                           row_shape=row_shape, cost=own + sum(s.cost for s in srcs),
                           row_reduces=frozenset().union(*[s.row_reduces for s in srcs]))
      if u.op is Ops.REDUCE_AXIS:  # a row reduce fused under a reduce over other axes: stored, and the walk runs again
        store_next |= {k: "reduce" for k in f.row_reduces if _reduce_space(k) != _reduce_space(u)}
      if u in stored or u.op is Ops.SINK: continue
      decision = _decided(u, f, _readers(u, consumers, asked, place), consumers[u])
      if decision == "row" and u.op is Ops.REDUCE_AXIS: fused[u] = f._replace(row_reduces=f.row_reduces | {u})
      elif decision in ("reduce", "dear"): stored[u] = decision
    if not store_next: return stored, {u: f.reduce for u, f in fused.items()}
    asked |= store_next

def _decided(u:UOp, f:Fused, readers:list[UOp], consumers:list[UOp]) -> str|None:
  """What kernel_outputs does with u (f: what it fuses), by the rules its docstring lists: "row", a row reduce kept in
  its readers' kernel; "reduce" or "dear", stored for that reason; None, fused into its readers."""
  broadcast_back = f.row_shape is not None and all(_own_rows(c, f.row_shape) for c in consumers)  # over its own rows
  again_cost = prod(f.row_shape or ()) * f.cost * (len(readers) - 1)  # its rows reduced again in each other reader
  elementwise = all(c.op in GroupOp.Elementwise for c in readers)
  cheap_again = f.row_shape is not None and again_cost < LAUNCH_COST and elementwise
  if broadcast_back or cheap_again: return "row"
  reduced_or_broadcast = any(c.op is Ops.REDUCE_AXIS or _broadcasts(c) for c in readers)
  if f.pending and (len(readers) > 1 or reduced_or_broadcast): return "reduce"  # (any reduce pending, rows or not)
  if f.cost * (sum(_copies(u, c) for c in readers) - 1) > STORE_COST: return "dear"
  return None

def _readers(u:UOp, consumers:dict[UOp, list[UOp]], asked:dict[UOp, str], place:dict[UOp, int]) -> list[UOp]:
  """u's consumers; or where all their paths through elementwise ops (not stored) meet in one op, that op alone: one
  kernel computes u once for all of them (relu reads x twice: (x > 0).where(x, 0); (x > 1).where(f(x), g(x)) three
  times). The paths' heads move on, the earliest first, until one is left."""
  heads = set(consumers[u])
  for _ in range(256):  # (a short walk: paths that meet further on count as apart)
    if len(heads) == 1: return list(heads)
    first = min(heads, key=place.__getitem__)
    if first in asked or first.op not in GroupOp.Elementwise or not consumers[first]: break
    heads = (heads - {first}) | set(consumers[first])
  return consumers[u]

def _reads_moved(a:UOp) -> bool:
  """Whether an ASSIGN's value reads its buffer other than element by element, where it writes: through another view
  of it, or under a move or a reduce of what reads it. Computed in one kernel with the writes, it could read an
  element already written."""
  written, value = a.src
  for u, aligned in _aligned_reads([value], True, stop=lambda u: False):
    moved = u is written and not aligned  # the view written, read under a move or a reduce
    other_view = u is not written and u.op is Ops.VIEW and u.src[0] is written.src[0]  # another view of its buffer
    if moved or other_view: return True
  return False

def _reduce_space(r:UOp) -> tuple:  # what a reduce runs over: its input's shape and the axes it reduces
  return r.src[0].shape, tuple(sorted(r.arg.axes))

def _pending(u:UOp, srcs:list[Fused]) -> tuple[bool, tuple|None]:
  """Whether a reduce is pending at u, not broadcast back yet, from what its fused sources hold; and, where it is one
  row reduce (not several, over the last axes), the shape of its rows."""
  if u.op is Ops.VIEW and srcs and srcs[0].row_shape is not None and _own_rows(u, srcs[0].row_shape):
    return False, None  # broadcast back: done
  if u.op is Ops.REDUCE_AXIS:
    axes, shape = sorted(u.arg.axes), u.src[0].shape
    over_last = axes == list(range(len(shape) - len(axes), len(shape)))
    nothing_below = not any(s.pending for s in srcs)  # (a source stored to memory holds no pending reduce)
    return True, (shape if over_last and nothing_below else None)
  held = {s.row_shape for s in srcs if s.pending}
  if not held: return False, None  # no reduce pending
  return True, (held.pop() if len(held) == 1 else None)  # one, over rows of this shape; or several that differ

def _own_rows(c:UOp, row:tuple) -> bool: return _broadcasts(c) and c.shape == row

def _copies(u:UOp, c:UOp) -> int:  # how many times consumer c reads each element of u: a broadcast's copies, else 1
  return max(1, prod(c.shape) // max(1, prod(u.shape))) if _broadcasts(c) else 1

def kernel_inputs(sink:UOp, reasons:dict[UOp, str]) -> dict[UOp, dict[UOp, bool]]:
  """For each stored node (the keys of reasons), in the order they are made, the stored nodes and the buffers its
  kernel reads, each with whether it reads them only element by element, where they are written (see _in_place)."""
  reads: dict[UOp, dict[UOp, bool]] = {}
  def read(u:UOp) -> bool: return u in reasons or u.op is Ops.BUFFER  # what a kernel reads from memory
  for r in (u for u in sink.toposort if u in reasons):
    reads[r] = {}
    for u, aligned in _aligned_reads(r.src, _in_place(r), stop=read):
      if read(u): reads[r][u] = reads[r].get(u, True) and aligned
  return reads

def _aligned_reads(srcs:Iterable[UOp], aligned:bool, stop:Callable[[UOp], bool]) -> Iterator[tuple[UOp, bool]]:
  """Each node these sources reach, once with each answer to whether all its elements are read where they are written
  (see _in_place); not past a node where stop holds."""
  stack, seen = [(s, aligned) for s in srcs], set()
  while stack:
    u, aligned = stack.pop()
    if (u, aligned) in seen: continue
    seen.add((u, aligned))
    yield u, aligned
    if not stop(u): stack.extend((s, aligned and _in_place(u)) for s in u.src)

def _in_place(u:UOp) -> bool:  # u reads each source where it is: not a reduce, nor a view that moves (a whole buffer's)
  return u.op is not Ops.REDUCE_AXIS and (u.op is not Ops.VIEW or _whole_buffer(u))

def group_outputs(reads:dict[UOp, dict[UOp, bool]], has_reduce:dict[UOp, bool]) -> list[list[UOp]]:
  """Outputs of one iteration space with no reduce share one kernel (a+b+c and a+b+d: one kernel, two stores). One
  that reads another only where it is written computes it in the kernel that stores it, from the same loads (an Adam
  step's m, v and the parameter they update: one kernel). The list is the order the kernels run in: each after every
  kernel whose outputs it reads. So an output that joins a group may move the group later: with groups [A], [B] and
  an output r that reads B and fits with A, A moves past B ([B], [A, r]), which is allowed only if B doesn't read A."""
  groups: list[list[UOp]] = []
  for r, read in reads.items():
    reads_from = [i for i, g in enumerate(groups) if any(d in read for d in g)]  # the groups whose outputs r reads
    last_read = max(reads_from, default=-1)  # r's kernel runs after this group's
    def fits(i:int) -> bool:
      g = groups[i] + [r]
      one_space = not any(has_reduce[o] or o.shape != r.shape or o.op is Ops.CONTIGUOUS for o in g)
      written = [_held_in(o) for o in g if o.op is Ops.ASSIGN]
      one_write_each = len(set(written)) == len(written)  # (a second write would land after the first one's loads)
      def same_memory(d:UOp) -> bool: return d in g or _held_in(d) in written  # the group's output, or its buffer
      in_place = all(aligned for o in g for d, aligned in reads[o].items() if same_memory(d))
      moved_past = [p for q in groups[i + 1:last_read + 1] for p in q]  # the kernels group i would move past
      unread = not any(o in reads[p] for p in moved_past for o in g)  # none of them reads what the group writes
      return one_space and one_write_each and in_place and unread
    alone = has_reduce[r] or r.op is Ops.CONTIGUOUS
    tries = [] if alone else reads_from + list(range(len(groups)))  # the groups it reads first, then any
    i = next((j for j in tries if fits(j)), None)
    if i is None: groups.append([r])
    else:
      # joined, and moved to run right after group last_read (popping i, before it, shifts last_read left one)
      j = max(i, last_read)
      groups.insert(j, groups.pop(i))
      groups[j].append(r)
  return groups

def _kernel(outs:list[UOp], views:dict[UOp, UOp], reasons:dict[UOp, str], entry_of:dict[UOp, int]) -> Kernel:
  """The kernel AST for outputs that share an iteration space: inputs and other kernels' outputs become PARAMs, where
  the walk stops (what made them is another kernel). What it stores is named by its entry (none for a node the plan
  made: a split's partial results, a packed b)."""
  bufs, memo = [], {}
  def param(buf:UOp) -> UOp:
    if buf not in bufs: bufs.append(buf)
    return UOp(Ops.PARAM, buf.dtype, (), Param(bufs.index(buf), buf.arg.size))
  def read(u:UOp) -> UOp|None:  # the BUFFER u is, if this kernel reads it from memory (another kernel's output too)
    return u if u.op is Ops.BUFFER else views[u].src[0] if u in views and u not in outs else None
  def ast(root:UOp) -> UOp:  # iterative: a long elementwise chain would overflow recursion
    stack = [root]
    while stack:
      u = stack[-1]
      if u in memo: stack.pop()
      elif (buf := read(u)) is not None:
        memo[u] = UOp(Ops.VIEW, u.dtype, (param(buf),), ShapeTracker.contiguous(u.shape))
      elif u.op is Ops.VIEW and (buf := read(u.src[0])) is not None:  # an input's view
        memo[u] = UOp(Ops.VIEW, u.dtype, (param(buf),), u.arg)
      elif any(s not in memo for s in u.src): stack.extend(s for s in u.src if s not in memo)  # sources first
      elif u.op is Ops.ASSIGN: memo[u] = memo[u.src[1]]  # its value, stored into the buffer it writes
      else: memo[u] = u.replace(src=tuple(memo[s] for s in u.src))
    return memo[root]
  params = [param(views[o].src[0]) for o in outs]  # outputs first
  stores = tuple(UOp(Ops.STORE, None, (p, ast(o))) for p, o in zip(params, outs))
  return Kernel(UOp(Ops.SINK, None, stores), bufs, {entry_of[o]: views[o] for o in outs if o in entry_of},
                ",".join(dict.fromkeys(reasons[o] for o in outs)))

# ---------------------------------------------------------------------------------------------------------------------
# Lowering: a kernel's AST becomes a program, in the steps ranged() and finish() list: ranges, opts that split them,
# lanes, threads, accumulators, one linear list of UOps, and source in the device's dialect.

@dataclass(frozen=True)
class Program:
  name: str
  src: str
  uops: list
  global_size: tuple[int, ...]
  local_size: tuple[int, ...]
  flops: int = 0  # its float and int operations, for DEBUG=2's rates
  moved: int = 0  # the bytes of its buffers, read or written, for DEBUG=2's rates
  opts: str = ""  # the opts it was lowered with, for DEBUG=2
  def dumps(self) -> bytes:  # for the disk cache: what runs source needs (the uops run only on the emulator)
    return json.dumps({k: v for k, v in vars(self).items() if k != "uops"}).encode()
  @staticmethod
  def loads(text:bytes) -> Program:  # (JSON has lists where the sizes were tuples)
    return Program(uops=[], **{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(text).items()})

widths = (4, 8, 16)  # lanes a vector may have: GPUs load float4s; a CPU's registers hold 4, 8 or 16 floats
vector_types = tuple(d.vec(n) for d in (dtypes.float, dtypes.int, dtypes.bool) for n in widths)  # lanes as one value
def whole_vectors(size:int) -> int:  # size rounded up to whole vectors (see apply_opt); never 0: drivers refuse 0 bytes
  return max(cdiv(size, widths[-1]), 1) * widths[-1]

class Target(NamedTuple):
  """What lowering knows of a device: the dialect it renders, and the limits the device reports."""
  renderer: Renderer
  local_max: int  # threads a block may have, as the device reports (1: no blocks)
  cores: int      # CPU threads a kernel may be split across (THREADS, or every core); a GPU: 1
  width: int      # lanes of its vectors, one of widths
  streams: int = 0  # bytes of the widest store past the cache the CPU has (x86's non-temporal stores); 0: none
  @property
  def gpu(self) -> bool: return self.renderer.gpu

def lower(ast:UOp, target:Target, device:str|None=None) -> Program:
  """The kernel's program: its opts chosen by the heuristic, or with BEAM=n and a device to time them on, searched."""
  sink = ranged(ast, target)
  if (beam_width := getenv("BEAM")) and device is not None and not getenv("NOOPT"):
    return beam(sink, ast, device, beam_width)
  return finish(*optimize(sink, target), ast, target)

def ranged(ast:UOp, target:Target) -> UOp:  # the AST over ranges, merged, with row programs: what opts split
  sink = rangeify(ast)
  sink = graph_rewrite(sink, approximations(target.renderer.approximates))  # transcendentals as arithmetic
  sink = merge_ranges(simplify(sink))
  return row_loops(sink) if target.gpu else reread(sink, target)

def finish(sink:UOp, opts:tuple[Opt, ...], ast:UOp, target:Target) -> Program:  # an optimized kernel, rendered
  name = kernel_name(sink)
  for step in (to_gpu if target.gpu else to_cpu, functools.partial(to_lanes, target=target), simplify, to_accumulators,
               after_stores, in_float32, simplify, add_loops, narrow_index, functools.partial(stream, target=target)):
    sink = step(sink)
  uops = linearize(sink)
  src = target.renderer.render(name, uops, params(ast))
  return Program(name, src, uops, *launch_dims(uops), *_cost(ast), opts=" ".join(map(str, opts)))

def params(ast:UOp) -> list[UOp]:  # a kernel's buffers in launch order: all of them, even one whose every read folded
  return sorted((u for u in ast.toposort if u.op is Ops.PARAM), key=lambda u: u.arg.slot)

def kernel_name(sink:UOp) -> str:  # its kind (E: elementwise, r: reduce) and the size of each axis
  rs = sorted((r for r in sink.toposort if r.op is Ops.RANGE), key=lambda r: (r.kind.value, r.arg.id))
  prefix = "r" if any(r.kind in (AxisType.REDUCE, AxisType.GROUP, AxisType.UNROLL) for r in rs) else "E"
  return "_".join([prefix] + [str(r.size) for r in rs]) if rs else prefix + "_1"

def launch_dims(uops:list[UOp]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """The global (blocks, or CPU threads) and local (threads per block) sizes, x y z, as every runtime takes them."""
  def dims(*kinds:AxisType) -> tuple[int, int, int]:
    return _xyz([u.size for u in sorted((u for u in uops if u.op is Ops.SPECIAL and u.kind in kinds),
                                         key=lambda u: u.arg.dim)])
  return dims(AxisType.GLOBAL, AxisType.THREAD), dims(AxisType.LOCAL)

def _xyz(size) -> tuple[int, int, int]: return tuple(size) + (1,) * (3 - len(size))

def _cost(ast:UOp) -> tuple[int, int]:  # its operations and the bytes it moves
  nodes = ast.toposort
  flops = sum(prod(u.src[0].shape if u.op is Ops.REDUCE_AXIS else u.shape)
              for u in nodes if u.op in GroupOp.ALU | {Ops.REDUCE_AXIS})
  return flops, sum(u.arg.size * u.dtype.itemsize for u in nodes if u.op is Ops.PARAM)

# ---------------------------------------------------------------------------------------------------------------------
# Lowering, step 1: rangeify. Each output dim becomes a RANGE, each reduced dim a RANGE of its REDUCE; views turn the
# ranges into addresses and gates. What comes out is index math that the symbolic rules simplify.

range_ids = itertools.count()
def new_range(size:int, kind:AxisType) -> UOp:  # (of size 1: the constant 0, which opts and lanes rely on)
  if size == 1: return UOp.const(dtypes.index, 0)
  return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), Axis(next(range_ids), kind))

def identity(op:Ops, dtype:DType) -> UOp:
  return UOp.const(dtype, {Ops.ADD: 0, Ops.MUL: 1}.get(op, dtypes.limits(dtype.scalar)[0]))  # x+0, x*1, max(x, min): x

def rangeify(ast:UOp) -> UOp:
  """A kernel AST's STORE(buf, value) becomes STORE(buf, addr, value at the output's ranges)."""
  stores = [st.src for st in ast.src]  # (buf, value): no address yet
  shape, memo = stores[0][1].shape, {}  # the kernel's outputs share one shape
  idxs = tuple(new_range(s, AxisType.GLOBAL) for s in shape)
  addr = View.contiguous(shape).index(idxs)[0]
  return UOp(Ops.SINK, None, tuple(UOp(Ops.STORE, None, (buf, addr, value_at(value, idxs, memo)))
                                   for buf, value in stores))

def value_at(u:UOp, idxs:tuple[UOp, ...], memo:dict) -> UOp:
  """The value of tensor node u at index idxs, as index-level UOps. Loads under a pad's mask carry it as their gate:
  outside the mask the address may point outside the buffer, and a gated load never reads it. Iterative, with the
  sources of each (node, index, gate) computed first: a long elementwise chain would overflow Python's recursion."""
  found: dict[tuple, list[tuple]] = {}  # (node, index, gate) -> the ones its value is made from
  def sources(key:tuple) -> list[tuple]:  # (the last first, as the walk always took them: ranges number in that order)
    found[key] = _sources_at(*key)
    return found[key][::-1]
  for key in postorder([(u, idxs, None)], sources, known=memo.__contains__):  # (no gate at the outputs)
    memo[key] = _value(*key, found[key], [memo[k] for k in found[key]])
  return memo[(u, idxs, None)]

def _indexed(u:UOp, idxs, valid) -> tuple[UOp, UOp|None, UOp|None]:  # address, the view's own mask, both gates
  addr, inner = u.arg.index(idxs)
  return addr, inner, all_of(valid, inner)

def _sources_at(u:UOp, idxs:tuple[UOp, ...], valid:UOp|None) -> list[tuple]:
  """Which (node, index, gate) the value of u at idxs is made from."""
  if u.op is Ops.VIEW:
    addr, _, gate = _indexed(u, idxs, valid)
    if u.src[0].op in (Ops.PARAM, Ops.CONST): return []
    # simplified, so a node read through two views at one index (a row's max, in its sum and its outputs) is one node
    return [(u.src[0], tuple(simplify(i) for i in unravel(addr, u.src[0].shape)), gate)]
  if u.op is Ops.REDUCE_AXIS:
    return [(u.src[0], tuple(new_range(s, AxisType.REDUCE) if i in u.arg.axes else idx
                             for i, (s, idx) in enumerate(zip(u.src[0].shape, idxs))), valid)]
  return [(s, idxs, valid) for s in u.src]

def _value(u:UOp, idxs:tuple[UOp, ...], valid:UOp|None, srcs:list[tuple], vals:list[UOp]) -> UOp:
  if u.op is Ops.VIEW:
    addr, inner, gate = _indexed(u, idxs, valid)
    if u.src[0].op is Ops.PARAM: return UOp(Ops.LOAD, u.dtype, (u.src[0], addr)).gated(gate)
    out = u.src[0] if u.src[0].op is Ops.CONST else vals[0]
    return out if inner is None else inner.where(out, out.const_like(0))
  if u.op is Ops.IOTA: return idxs[0]
  if u.op is Ops.CONTIGUOUS: return vals[0]
  if u.op is Ops.REDUCE_AXIS:
    _, read_at, _ = srcs[0]  # the index its source is read at: the output's, and a range for each reduced dim
    reduced = tuple(r for r in read_at if r.op is Ops.RANGE and r not in idxs)
    if not reduced: return vals[0]
    return picked(vals[0], reduced, u.arg.op) or UOp(Ops.REDUCE, u.dtype, (vals[0],) + reduced, u.arg.op)
  return u.replace(src=tuple(vals))

def picked(v:UOp, reduced:tuple[UOp, ...], op:Ops) -> UOp|None:
  """A sum over ranges r of (r == e ? x : 0), where e doesn't vary with them, is x at r = e, where 0 <= e < r's size:
  one load of x, not a pass over all of it. An index picks elements so (x[idx], gather, nn.Embedding: see _pick).
  Under a cast too: a small int's sum adds in a wider one."""
  if op is Ops.ADD and v.op is Ops.CAST and (inner := picked(v.src[0], reduced, op)) is not None:
    return inner.cast(v.dtype)
  if op is not Ops.ADD or v.op is not Ops.WHERE or v.src[2].op is not Ops.CONST or v.src[2].arg != 0: return None
  at: dict[UOp, UOp] = {}
  def pins(t:UOp) -> tuple[UOp, UOp]|None:  # a condition r == e (or e == r) for a reduced range r not pinned yet
    if t.op is not Ops.CMPEQ: return None
    for a, e in (t.src, t.src[::-1]):  # r == e, or e == r
      a = simplify(a)  # (an arange is r * 1 + 0 until simplified)
      casts, r = [], a
      while r.op is Ops.CAST: casts, r = casts + [r.dtype], r.src[0]  # (an arange compared as an int: under casts)
      exact = all(dtypes.is_int(d) and r.op is Ops.RANGE and r.size - 1 <= dtypes.max(d) for d in casts)
      if exact and r in reduced and r not in at and not any(q in reduced for q in e.toposort): return r, e  # e: fixed
    return None
  rest = []
  for t in v.src[0].terms(Ops.AND):
    if (pin := pins(t)) is None: rest.append(t)
    else: at[pin[0]] = pin[1].cast(dtypes.index)
  if len(at) != len(reduced): return None
  # each pick in range (-1 < e < r's size), and the rest of the condition
  valid = all_of(*[(e.const_like(-1) < e) & (e < r.src[0]) for r, e in at.items()], *[substitute(t, at) for t in rest])
  def place(u:UOp, new:UOp) -> UOp:  # r is e; a load happens only where every pick is in range
    if u in at: return at[u]
    # (a load rebuilt: its address reads a pick, which may be out of range)
    return new.gated(valid) if u.op is Ops.LOAD and new is not u else new
  return valid.where(rebuild(v.src[1], place), v.src[2])

def ranges(u:UOp, kind:AxisType|None=None) -> list[UOp]:  # in the order they were made: outermost first
  return sorted((r for r in u.toposort if r.op is Ops.RANGE and kind in (None, r.kind)), key=lambda r: r.arg.id)
def free_ranges(sink:UOp) -> dict[UOp, frozenset]:  # the ranges each value varies with (a reduce's own are bound)
  free: dict[UOp, frozenset] = {}
  for u in sink.toposort:
    used = frozenset().union(*[free[s] for s in u.src])
    if u.op is Ops.RANGE: used |= {u}
    elif u.op is Ops.REDUCE: used -= set(u.src[1:])
    free[u] = used
  return free
def count_divmod(u:UOp) -> int: return sum(1 for x in u.toposort if x.op in (Ops.IDIV, Ops.MOD))

def merge_ranges(sink:UOp) -> UOp:
  """Merge adjacent global ranges where the merge adds no div/mod: a contiguous (256,4096) kernel is one axis."""
  rs = ranges(sink, AxisType.GLOBAL)
  # innermost pair first: once b merged with the range inside it, merging (a, b) adds a division the count refuses
  for a, b in reversed(list(zip(rs, rs[1:]))):
    merged = merge(sink, a, b)
    if count_divmod(merged) <= count_divmod(sink): sink = merged
  return sink

def merge(sink:UOp, a:UOp, b:UOp) -> UOp:
  """Ranges a (outer) and b (inner) as one range r: a = r // |b|, b = r % |b|."""
  r = new_range(a.size * b.size, a.kind)
  return simplify(substitute(sink, {a: r // b.size, b: r % b.size}))

# ---------------------------------------------------------------------------------------------------------------------
# Lowering, step 2: transcendentals as arithmetic. Where a device's C has no vector exp2, log2 or sin (the CPU's libm
# takes one call per element, which vector lanes can't share), float32 exp2, log2 and sin become +, *, compares and
# operations on the float's bits, which vectorize with the rest of the kernel. GPUs keep their instructions. Each
# polynomial is a least-squares fit at Chebyshev points, reweighted toward equal relative error (near minimax);
# test_tiny measures the error in ulps over the whole float range.

LOG2_E = 1.4426950216293335  # 1 / ln 2 as a float32 holds it: Tensor.exp's constant
LN2_HIGH, LN2_LOW = 0.693359375, -2.1219444005469057e-4  # ln 2 = 355/512 (9 bits: n times it is exact) + the rest

@functools.cache
def approximations(ops:frozenset[Ops]) -> PatternMatcher:
  # Tensor.exp's 2**(x * log2(e)): rounding that product costs up to |x| ulps, so _exp reduces x by ln 2 itself
  exp = UPat(Ops.EXP2, dtypes.float, src=(UPat(Ops.MUL, src=[UPat.var("x"), UPat(Ops.CONST, arg=LOG2_E)]),))
  rules = [(UPat(op, dtypes.float, name="u"), lambda u: transcendental[u.op](u.src[0])) for op in ops]
  return PatternMatcher(([(exp, _exp)] if Ops.EXP2 in ops else []) + rules)

def _poly(x:UOp, coeffs:list[float]) -> UOp:  # c0 + x*(c1 + x*(c2 + ...)): Horner's rule
  return functools.reduce(lambda acc, c: acc * x + c, reversed(coeffs[:-1]), x.const_like(coeffs[-1]))
def _scale(n:UOp) -> UOp: return ((n + 127) << 23).bitcast(dtypes.float)  # 2**n for n in [-126, 127]

def _exp2(x:UOp) -> UOp:
  """2**x = 2**f * 2**n with n = round(x) and f = x - n in [-0.5, 0.5]. x is clamped to [-151, 129] (past it the
  result is 0 or inf anyway) by selects, which are false for nan: nan stays nan."""
  x = _clamped(x, -151.0, 129.0)
  n, whole = _rounded(x)
  return _times_power_of_two(x - whole, n)

def _exp(x:UOp) -> UOp:
  """e**x = 2**f * 2**n with n = round(x log2(e)) and f = (x - n ln 2) log2(e), x - n ln 2 in two steps, the first
  exact (Cody and Waite). x is clamped to [-104, 89], past which e**x is 0 or inf."""
  x = _clamped(x, -104.0, 89.0)
  n, whole = _rounded(x * LOG2_E)
  return _times_power_of_two(((x - whole * LN2_HIGH) - whole * LN2_LOW) * LOG2_E, n)

def _clamped(x:UOp, low:float, high:float) -> UOp:  # (selects false for nan: nan stays nan)
  x = (x.const_like(high) < x).where(x.const_like(high), x)
  return (x < low).where(x.const_like(low), x)

def _rounded(x:UOp) -> tuple[UOp, UOp]:  # round(x), as an int and as a float, for |x| < 2**22
  big = x.const_like(12582912.0)  # 1.5 * 2**23: adding it rounds x to an integer, which lands in the low bits
  t = x + big
  return t.bitcast(dtypes.int) - 0x4B400000, t - big  # (0x4B400000: the bits of big)

def _times_power_of_two(f:UOp, n:UOp) -> UOp:
  """2**f * 2**n for f in [-0.5, 0.5]: a polynomial for 2**f, and 2**n made of exponent bits in two halves, so that a
  subnormal result or an overflow to inf is one rounding of a product."""
  p = f * _poly(f, [0.6931471824645996, 0.24022647738456726, 0.055503323674201965, 0.00961843691766262,
                    0.0013398875016719103, 0.00015353360504377633]) + 1.0
  return p * _scale(n >> 1) * _scale(n - (n >> 1))

def _log2(x:UOp) -> UOp:
  """log2(x) = e + log2(1+f) for x = (1+f) * 2**e with 1+f in [sqrt(1/2), sqrt(2)): e from the exponent bits, and
  log2(1+f) = f * Q(f), a polynomial in f; f = mantissa - 1 is exact (the usual s = f / (2 + f) would round in its
  division). A subnormal x is scaled by 2**23 first. 0, negatives, inf and nan get their results at the end."""
  subnormal = x < 1.1754943508222875e-38  # 2**-126
  bits = subnormal.where(x * 8388608.0, x).bitcast(dtypes.int)
  mantissa = ((bits & 0x007FFFFF) | 0x3F800000).bitcast(dtypes.float)  # in [1, 2)
  high = x.const_like(1.4142135381698608) < mantissa
  bias = subnormal.where(bits.const_like(-150), bits.const_like(-127))  # 23 more where x was scaled up by 2**23
  e = (bits >> 23) + bias + high.cast(dtypes.int)  # (1 more where the mantissa is halved below)
  f = high.where(mantissa * 0.5, mantissa) - 1.0
  log = e.cast(dtypes.float) + f * _poly(f, [1.4426950216293335, -0.7213473320007324, 0.4808982312679291,
    -0.3606966435909271, 0.2885673940181732, -0.23961739242076874, 0.2046007663011551, -0.19106297194957733,
    0.18617413938045502, -0.1099480614066124])
  zero, inf, nan = x.const_like(0.0), x.const_like(math.inf), x.const_like(math.nan)
  special = x.alu(Ops.CMPEQ, zero).where(-inf, x.alu(Ops.CMPEQ, inf).where(x, log))  # log2 0 = -inf, log2 inf = inf
  return ((x < 0.0) | x.alu(Ops.CMPNE, x)).where(nan, special)  # negatives and nan: nan

def _sin(x:UOp) -> UOp:
  """sin(x) = ±sin(r) or ±cos(r) by the quadrant q of x = q*pi/2 + r (sin is odd: |x| is reduced, the sign put back),
  r as hi + lo for the polynomials. |x| < pi/4 is r itself; past it, _payne_hanek (in the last section: bit-exact
  integer arithmetic a first reading can skip) finds q and r exactly, for every float up to 3.4e38. inf and nan give
  nan."""
  bits = x.bitcast(dtypes.int)
  mag = bits & 0x7FFFFFFF
  ax = mag.bitcast(dtypes.float)
  near = ax < 0.7853981852531433  # pi/4, rounded up
  q, hi, lo = _payne_hanek(mag)
  q = near.where(q.const_like(0), q)
  hi = near.where(ax, hi)
  lo = near.where(lo.const_like(0.0), lo)
  z = hi * hi
  sin = hi + (hi * z * _poly(z, [-0.16666655242443085, 0.008332161232829094, -0.0001951528392964974]) + lo)
  cos = ((z * z * _poly(z, [0.04166664555668831, -0.0013887316454201937, 2.44331567955669e-05]) - z * 0.5) -
         hi * lo) + 1.0
  y = (q & 1).alu(Ops.CMPNE, q.const_like(0)).where(cos, sin)
  # -sin past pi (quadrants 2 and 3: q's bit 1 shifted into the sign bit), and sin(-x) = -sin(x)
  sign = ((q << 30) & -2**31).alu(Ops.XOR, bits & -2**31)
  signed = y.bitcast(dtypes.int).alu(Ops.XOR, sign).bitcast(dtypes.float)
  return (mag < 0x7F800000).where(signed, x.const_like(math.nan))

transcendental: dict[Ops, Callable[[UOp], UOp]] = {Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin}

# ---------------------------------------------------------------------------------------------------------------------
# Lowering, step 3: row programs. A kernel whose reduces run over a row (a softmax: the row's max, its sum, then its
# outputs) computes them once a row: on a GPU, a block per row whose threads share each reduce (row_loops); on a CPU,
# a loop per row, with a costly value stored once and read back (reread).

REREAD_COST = 8  # operations (of the value's own dtype, not index math) that cost more than a store and a load
ROW_BYTES = 2**16  # a row kept on a thread's stack: within L2, and far within the stack

def row_loops(sink:UOp) -> UOp:
  """A row program on a GPU runs a block per row: the row's columns (the output ranges no reduce in the kernel varies
  with) become loops in the block's threads, which compute the row's reduces once, together, then its outputs. Not
  where a reduce runs inside another's loop: a block shares one reduce at a time."""
  reduces, free = [u for u in sink.toposort if u.op is Ops.REDUCE], free_ranges(sink)
  if not reduces or _nested(sink): return sink
  cols = set(ranges(sink, AxisType.GLOBAL)) - set().union(*[free[u] for u in reduces])
  return substitute(sink, {r: r.replace(arg=Axis(r.arg.id, AxisType.COLUMN)) for r in cols})

def reread(sink:UOp, target:Target) -> UOp:
  """A row program computes a costly value twice: in a reduce's loop, and again for the row's outputs (a softmax row's
  exp, summed, then divided by the sum). Where the output holds that value's dtype, the reduce's loop stores it there
  and the outputs read it back from cache: a load for an exp2's 35 operations (see approximations). An output past
  the cache keeps the row on the stack instead, and the loop prefetches the next row (_reread: together 1.15x from
  memory, 1.4x from a warm cache). Only on CPUs (a GPU's exp2 is one instruction, and its threads would read each
  other's columns); where rows are the outer ranges (threads split the rows, each owning its rows' columns); for a
  reduce over the row's columns computed once a row (its accumulator lives in every row loop, so the store has them
  all open); into an ungated store of a buffer the kernel reads nothing else from. to_accumulators puts the store in
  the reduce's loop, after_stores the load after it."""
  reduces, free = [u for u in sink.toposort if u.op is Ops.REDUCE], free_ranges(sink)
  glob = ranges(sink, AxisType.GLOBAL)
  cols = [r for r in glob if not any(r in free[u] for u in reduces)]
  # (rows outer: the first output range is no column; columns inner: the last len(cols) ranges)
  if not cols or glob[0] in cols or glob[-len(cols):] != cols or _nested(sink): return sink
  row_ranges = set(glob) - set(cols)
  loaded = {x.buf for x in sink.toposort if x.op is Ops.LOAD}
  early, late = [], []
  for st in sink.src:
    out = st  # the output store, reading the value back where a reduce's loop stores it
    for u in reduces:
      shared = dict(zip(u.src[1:], cols))  # the reduce's loop over the row's columns, in order
      over_columns = len(u.src) - 1 == len(cols) and all(r.size == c.size for r, c in shared.items())
      if not over_columns or not row_ranges <= free[u]: continue  # (and computed once a row)
      value = substitute(u.src[0], shared)
      costly = value.dtype == st.value.dtype and value in st.value.toposort and _alu_cost(value) >= REREAD_COST
      # (a value that doesn't vary along the row, a broadcast row's exp, is the reduce's own: nothing to store)
      varies = not set(cols).isdisjoint(value.toposort)
      if costly and varies and st.gate is None and st.buf not in loaded:
        stores, out = _reread(st, u, value, shared, row_ranges, target)
        early += stores
        break
    late.append(out)
  return sink.replace(src=tuple(early + late))

def _reread(st:UOp, u:UOp, value:UOp, shared:dict[UOp, UOp], row_ranges:set[UOp], target:Target) -> tuple[list, UOp]:
  """What reread adds to reduce u's loop (the store of value, the next row's prefetches: _next_row), and output store
  st, now reading value back. An output past the cache (see stream) keeps the row on the stack where it fits in
  ROW_BYTES: the output is written once and never read (a softmax of 4096x1024 moves 32 MB, not 48; a cached output
  gains nothing from the row, its stores would only move there)."""
  cols = list(shared.values())
  buf, addr, size = st.buf, st.addr, prod(c.size for c in cols)
  if past_cache(st.buf, target) and size * value.dtype.itemsize <= ROW_BYTES:  # the row on the stack, by column
    buf = UOp(Ops.DEFINE_LOCAL, value.dtype, (), Local(u.src[1].arg.id, whole_vectors(size)))  # (named by its loop)
    addr = functools.reduce(lambda a, c: a * c.size + c, cols[1:], cols[0])  # the row's flat column index
  in_loop = substitute(addr, {c: r for r, c in shared.items()})  # the address, the reduce's loop ranges for columns
  read_back = substitute(st.value, {value: UOp(Ops.LOAD, value.dtype, (buf, addr))})
  added = [UOp(Ops.STORE, None, (buf, in_loop, u.src[0])), *_next_row(u, row_ranges)]
  return added, st.replace(src=(st.buf, st.addr, read_back))

def _next_row(u:UOp, row_ranges:set[UOp]) -> list[UOp]:
  """Prefetches, in reduce u's loop, of what the next row's loop will load: each of its loads whose address moves
  with the innermost row range, one row ahead. A row of 4 KB starts on a new page, where the hardware's prefetcher
  stops; the loop's operations hide the fetch."""
  row = max(row_ranges, key=lambda r: r.arg.id)  # the innermost
  own = set(u.src[1:])  # (loads in this reduce's loop: not those of a reduce inside it, a row's max)
  ahead = (row < row.size - 1).where(row + 1, row)  # the last row fetches itself: no address past the end
  def moves_with_row(x:UOp) -> bool:  # a load of this reduce's loop whose address moves with the row
    return x.op is Ops.LOAD and x.buf.op is Ops.PARAM and row in x.addr.toposort and not own.isdisjoint(x.addr.toposort)
  return [UOp(Ops.PREFETCH, None, (x.buf, substitute(x.addr, {row: ahead}))) for x in u.src[0].toposort
          if moves_with_row(x)]

def _alu_cost(u:UOp) -> int:
  return sum(alu_costs.get(x.op, 1) for x in u.toposort if x.op in GroupOp.ALU and x.dtype == u.dtype)

def _nested(sink:UOp) -> bool:  # a reduce runs inside another's loop: it varies with more than the output ranges
  free, glob = free_ranges(sink), set(ranges(sink, AxisType.GLOBAL))
  return not all(free[u] <= glob for u in sink.toposort if u.op is Ops.REDUCE)

# ---------------------------------------------------------------------------------------------------------------------
# Lowering, step 4: kernel opts. Each one splits a range r of size n into kept*amount + new, where new is a range of the
# opt's kind and kept keeps r's place (a CPU thread's: new*chunk + kept, new picking the chunk). Later steps give kinds
# their meaning: upcast/unroll become vector lanes, local becomes threadIdx, group a reduction shared across a block. A
# split that doesn't divide gets a gate, so every size works with full blocks.

@dataclass(frozen=True)
class Opt:
  kind: AxisType  # UPCAST, UNROLL, LOCAL, GROUP, THREAD, WARP (the reduce of a matmul on tensor cores), or GLOBAL
                  # (tile_order: a whole range looped again inside the others)
  axis: UOp       # the RANGE to split
  amount: int
  core: TensorCore|None = None  # a WARP opt's
  def __str__(self) -> str: return f"{self.kind.name.lower()} {self.axis.size}:{self.amount}"  # e.g. "upcast 1024:16"

def optimize(sink:UOp, target:Target) -> tuple[UOp, tuple[Opt, ...]]:  # the heuristic's opts, then the launch's
  if getenv("NOOPT") or any(r.size == 0 for r in ranges(sink)): return sink, ()
  opts = tuple(heuristic(sink, target))
  for opt in opts: sink = apply_opt(sink, opt)
  return launch_opts(sink, opts, target)

def launch_opts(sink:UOp, opts:tuple[Opt, ...], target:Target) -> tuple[UOp, tuple[Opt, ...]]:
  """The threads of a block (GPU), or a matmul's loop order and then the cores (CPU), after the opts before."""
  steps = (local_opts,) if target.gpu else (tile_order, thread_opts)
  for step in steps:
    for opt in step(sink, target): sink, opts = apply_opt(sink, opt), opts + (opt,)
  return sink, opts

def apply_opt(sink:UOp, opt:Opt) -> UOp:
  if opt.kind is AxisType.WARP: return on_tensor_cores(sink, opt.core)
  n = opt.axis.size
  # kept: the part that keeps the range's id, and so its place among the loops (rows stay outside columns), of size
  # n/amount; new: the opt's own range, of size amount
  kept = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, cdiv(n, opt.amount)),), opt.axis.arg)
  new = new_range(opt.amount, opt.kind)
  # a CPU thread (new) takes one contiguous chunk; every other split puts its new range innermost (a GLOBAL opt of a
  # whole range, tile_order's, makes it a new output loop inside the others)
  expr = new * cdiv(n, opt.amount) + kept if opt.kind is AxisType.THREAD else kept * opt.amount + new
  sink = substitute(sink, {opt.axis: expr})
  # a reduce over the split range runs over both of its parts (ranges() of the expression, in order)
  sink = substitute(sink, {u: u.replace(src=(u.src[0],) + tuple(r for s in u.src[1:] for r in ranges(s)))
                           for u in sink.toposort if u.op is Ops.REDUCE and expr in u.src})
  if n % opt.amount == 0: return simplify(sink)
  # loads, stores and reduce inputs that use the split are gated. An upcast's last vector may run past n: buffers are
  # allocated in whole vectors of the widest width, so an access at an aligned base + lane stays inside its
  # allocation, and needs no gate (see lanes_and_tiles)
  valid, split = expr < n, {kept, new}
  def guarded(_, u:UOp) -> UOp:
    if u.op in (Ops.LOAD, Ops.STORE) and u.buf.op is Ops.PARAM and any(r in split for r in u.addr.toposort):
      return u if opt.kind is AxisType.UPCAST and _aligned(u.addr, new, opt.amount) else u.gated(valid)
    if u.op is Ops.REDUCE and any(r in split for r in u.src[1:]):
      return u.replace(src=(valid.where(u.src[0], identity(u.arg, u.dtype)),) + u.src[1:])
    return u
  return simplify(rebuild(sink, guarded))

def _aligned(addr:UOp, lane:UOp, width:int) -> bool:  # addr is lane + terms without it, each a multiple of width
  terms = addr.terms()
  return lane in terms and all(t.const_factor() % width == 0 and lane not in t.toposort for t in terms if t is not lane)

def heuristic(sink:UOp, target:Target) -> list[Opt]:
  """Hand-coded opts, in tinygrad's spirit; the threads of a block (GPU) or the cores (CPU) come after (launch_opts)."""
  return tensor_core_opts(sink, target) or (shared_reduces(sink, target) if target.gpu else []) or \
    unrolled_compares(sink) or lanes_and_tiles(sink, target)

def unrolled_compares(sink:UOp) -> list[Opt]:
  """A compare of small ranges and nothing else (a scan's triangle, j <= i) is a constant in each unrolled copy of
  them: unroll them whole (outputs upcast, reduces unrolled) and every such compare folds away (a 1M cumsum's blocks:
  3.7x faster). At most 256 copies of the kernel's body."""
  pure = [ranges(u) for u in sink.toposort if u.op in GroupOp.Compare and not any(x.op is Ops.LOAD for x in u.toposort)]
  small_sets = [rs for rs in pure if len(rs) > 1 and all(r.size <= 16 for r in rs)]  # (16 x 16: the 256 copies)
  small = {r for rs in small_sets for r in rs}
  if not small or prod(r.size for r in small) > 256: return []
  return [Opt(AxisType.UNROLL if r.kind is AxisType.REDUCE else AxisType.UPCAST, r, r.size)
          for r in sorted(small, key=lambda r: r.arg.id)]

# Tensor cores: a warp multiplies tiles of a matrix (D = A @ B + C, A and B in 16-bit floats, C and D in float32) in one
# instruction, each of its 32 lanes holding a few elements of each tile, where the device's layout puts them. The
# layout is defined once, here: the lowering loads and stores each lane's elements by it, and the emulator multiplies
# the lanes' fragments by it, as the device does.
class TensorCore(NamedTuple):
  name: str                    # the instruction, which the emulator knows it by
  dims: tuple[int, int, int]   # m, n, k: D is m x n, A m x k, B k x n
  dtype: DType                 # of A and B
  a: Callable  # (lane, i) -> (row, column) in A of the lane's element i, for a lane that is an int or a UOp
  b: Callable
  c: Callable  # of C and D
  elements: tuple[int, int, int]  # a lane's elements of A, B and C
  @property
  def function(self) -> str: return "tiny_" + self.name.replace(".", "_")  # what a renderer calls it by

def _mma(dtype:DType) -> TensorCore:
  """CUDA's mma.sync m16n8k16 (sm_80 and later), as PTX's ISA lays out its fragments: lane l is in group l // 4,
  thread l % 4 of its group; A's elements go by pairs down rows g and g + 8, then 8 columns on, B's by pairs down its
  rows, in column g, C's by pairs along rows g and g + 8."""
  return TensorCore(f"mma.m16n8k16.{dtype.name}", (16, 8, 16), dtype,
                    a=lambda l, i: (l // 4 + 8 * (i // 2 % 2), l % 4 * 2 + i % 2 + 8 * (i // 4)),
                    b=lambda l, i: (l % 4 * 2 + i % 2 + 8 * (i // 2), l // 4),
                    c=lambda l, i: (l // 4 + 8 * (i // 2), l % 4 * 2 + i % 2), elements=(8, 4, 4))
def _simdgroup(dtype:DType) -> TensorCore:
  """Metal's simdgroup_multiply_accumulate on 8x8 matrices, each lane holding two elements side by side of each, the
  same for A, B and C: pairs along a row, two lanes a row, rows in pairs of quads (as Apple's GPUs lay them out)."""
  def at(l, i): return (l // 2 % 2 + 2 * (l // 4 % 2) + 4 * (l // 16), i + 2 * (l % 2) + 4 * (l // 8 % 2))
  return TensorCore(f"simdgroup.8x8x8.{dtype.name}", (8, 8, 8), dtype, a=at, b=at, c=at, elements=(2, 2, 2))
CUDA_CORES = (_mma(dtypes.half), _mma(dtypes.bfloat16))
METAL_CORES = (_simdgroup(dtypes.half), _simdgroup(dtypes.bfloat16))
TENSOR_CORES = {tc.name: tc for tc in CUDA_CORES + METAL_CORES}

class Fit(NamedTuple):  # a reduce a tensor core can take, and its parts
  reduce: UOp
  m: UOp  # the ranges of A's rows, B's columns, and the shared axis
  n: UOp
  k: UOp
  a: UOp  # the 16-bit values multiplied, before their cast to float
  b: UOp

def tensor_core_fit(sink:UOp, core:TensorCore) -> Fit|None:
  """The one reduce of this kernel, if it sums products of two 16-bit floats of the core's dtype, cast to float, over
  an axis that both read, each with an output axis of its own, and the core's tile divides every one (the rest fall
  back to the other opts)."""
  reduces = [u for u in sink.toposort if u.op is Ops.REDUCE]
  if len(reduces) != 1 or len(sink.src) != 1 or reduces[0].arg is not Ops.ADD or len(reduces[0].src) != 2: return None
  r, mul = reduces[0], reduces[0].src[0]
  if mul.op is not Ops.MUL or any(s.op is not Ops.CAST or s.src[0].dtype != core.dtype for s in mul.src): return None
  x, y = (s.src[0] for s in mul.src)
  rx, ry, k = set(ranges(x)), set(ranges(y)), r.src[1]
  own_x, own_y = [q for q in rx - ry if q.kind is AxisType.GLOBAL], [q for q in ry - rx if q.kind is AxisType.GLOBAL]
  if len(own_x) != 1 or len(own_y) != 1 or k not in rx & ry: return None
  (m, a), (n, b) = sorted([(own_x[0], x), (own_y[0], y)], key=lambda p: p[0].arg.id)  # rows outside columns
  if any(q.size % d for q, d in zip((m, n, k), core.dims)): return None
  return Fit(r, m, n, k, a, b)

def tensor_core_opts(sink:UOp, target:Target) -> list[Opt]:
  for core in target.renderer.tensor_cores:
    if (fit := tensor_core_fit(sink, core)) is not None: return [Opt(AxisType.WARP, fit.k, core.dims[2], core)]
  return []

def on_tensor_cores(sink:UOp, core:TensorCore) -> UOp:
  """The reduce, run by one warp for each tile of m x n outputs (core.dims). Each step along k, a tile of k at a time,
  loads each lane's elements of A's and B's tiles into vectors, multiplies them on the tensor cores, and adds each of
  the lane's elements of the product to its own accumulator; the store then runs once for each of them, where the
  layout puts it."""
  fit, lane = tensor_core_fit(sink, core), new_range(32, AxisType.LOCAL)
  size = dict(zip((fit.m, fit.n, fit.k), core.dims))  # a tile's size along each of m, n and k
  # the range of the tiles along each, in its range's place (the same arg)
  tiles = {q: UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, q.size // d),), q.arg) for q, d in size.items()}
  def along(q:UOp, i:int|UOp) -> UOp: return tiles[q] * size[q] + i  # element i of the tile, on q's axis
  def fragment(x:UOp, rows:UOp, cols:UOp, at:Callable, count:int, dtype:DType) -> UOp:  # a lane's elements of x
    def element(i:int, j:int) -> UOp: return substitute(x, {rows: along(rows, i), cols: along(cols, j)})
    return UOp(Ops.VECTORIZE, dtype.vec(count), tuple(element(*at(lane, e)) for e in range(count)))
  zero = UOp.const(dtypes.float.vec(core.elements[2]), 0.0)
  a = fragment(fit.a, fit.m, fit.k, core.a, core.elements[0], core.dtype)
  b = fragment(fit.b, fit.k, fit.n, core.b, core.elements[1], core.dtype)
  product = UOp(Ops.WMMA, dtypes.float.vec(core.elements[2]), (a, b, zero), core.name)
  stores = []
  for i in range(core.elements[2]):
    row, col = core.c(lane, i)
    # element i of the product, summed over k's tiles, stored where the layout puts it in the m x n tile
    total = UOp(Ops.REDUCE, dtypes.float, (UOp(Ops.GEP, dtypes.float, (product,), i), tiles[fit.k]), Ops.ADD)
    stores.append(substitute(sink.src[0], {fit.reduce: total, fit.m: along(fit.m, row), fit.n: along(fit.n, col)}))
  return simplify(sink.replace(src=tuple(stores)))

def shared_reduces(sink:UOp, target:Target) -> list[Opt]:
  """A GPU block's threads share a reduce where a thread per output would leave the GPU idle or read rows apart: a row
  program's block (its threads share each reduce, then the last column), or a block per output where outputs are few
  (2048 or fewer, or under 16384 with rows long enough to share: the 10 columns of an MLP's last matmul) or each reads
  a long row of its own (a row softmax: a thread per row would read rows apart, uncoalesced)."""
  glob, red = ranges(sink, AxisType.GLOBAL), ranges(sink, AxisType.REDUCE)
  inner = list(dict.fromkeys(u.src[-1] for u in sink.toposort if u.op is Ops.REDUCE))  # each reduce's innermost loop
  if cols := ranges(sink, AxisType.COLUMN):
    block = min(target.local_max, 256, 1 << (cols[-1].size - 1).bit_length())  # (the power of two at or above its size)
    return [Opt(AxisType.GROUP, r, block) for r in inner] + [Opt(AxisType.LOCAL, cols[-1], block)]
  if not red: return []
  out_size, n = prod(r.size for r in glob), red[-1].size
  row_loads = any(u.op is Ops.LOAD and red[-1] in u.addr.terms() for u in sink.toposort)  # elements side by side
  long_rows = n >= 256 and not any(_reused(sink, r) for r in glob) and row_loads
  if not (out_size <= 2048 or (out_size < 2**14 and n >= 256) or long_rows): return []
  # each reduce shares the block where none runs inside another's loop (a row's mean, then the squares about it):
  # their groups run in turn, on one thread id
  shared = [red[-1]] if _nested(sink) else inner
  return [Opt(AxisType.GROUP, r, min(target.local_max, 256, 1 << (n.bit_length() - 1))) for r in shared]  # (2**k <= n)

ACCUMULATORS = 16  # vector registers a CPU's matmul tile holds: half of AVX-512's 32

def lanes_and_tiles(sink:UOp, target:Target) -> list[Opt]:
  """Vectors on the contiguous output axis, a matmul's register tile, a row's outputs as vectors after its reduces, and
  unrolled reduce loops. A CPU's choices differ from a GPU's in four places, each marked: its tile takes whole vectors
  of the contiguous axis, and rows where the loads of those vectors don't move; a GPU tiles only where enough threads
  remain; a CPU unrolls a sum by whole vectors."""
  opts: list[Opt] = []
  glob, red = ranges(sink, AxisType.GLOBAL), ranges(sink, AxisType.REDUCE)
  reduces = [u for u in sink.toposort if u.op is Ops.REDUCE]
  inner = list(dict.fromkeys(u.src[-1] for u in reduces))  # each reduce's innermost loop
  out_size, w = prod(r.size for r in glob), target.width
  if not red and glob and _unit_stride(sink, glob[-1]):
    # one output range: the device's width, the last vector into the padding past the end (see apply_opt); several:
    # the widest vector that fills the last
    amount = w if len(glob) == 1 and glob[-1].size >= w else _filled(glob[-1].size, target)
    if amount: opts.append(Opt(AxisType.UPCAST, glob[-1], amount))
  # on the CPU a matmul's tile takes whole vectors of the contiguous axis (four where they divide it, else two, else
  # one), and the rows that make ACCUMULATORS vector accumulators: 256 x 784 (a weight's gradient) 5x faster than four
  # lanes a row. Only where b's columns are side by side (a b read transposed, too small to pack, has them a row apart)
  vectors = 0
  if red and glob and not target.gpu and _unit_stride(sink, glob[-1]) and _side_by_side(sink, glob[-1]):
    vectors = next((k for k in (4, 2, 1) if glob[-1].size % (k * w) == 0), 0)
  if red:  # the register tile of a matmul: each load feeds several outputs
    # on the CPU its rows are first sought where the loads along the contiguous axis don't move, so that each vector
    # of b feeds every row: a conv's output channels, not its image rows (a 32x32x32x32 3x3 conv's matmul: 2.5x)
    def b_moves(r:UOp) -> bool: return not target.gpu and r is not glob[-1] and _moves_with(sink, r, glob[-1])
    for r in sorted(reversed(glob), key=b_moves):
      if r is glob[-1]: n = vectors * w or 4
      else: n = ACCUMULATORS // vectors if vectors and r.size % (ACCUMULATORS // vectors) == 0 else 4
      # a GPU keeps 65536 threads or more (about 500 an SM on an H100): fewer can't hide each other's memory latency
      launched = out_size // (prod(o.amount for o in opts) * n)  # GPU threads
      enough_threads = not target.gpu or launched >= 2**16
      # (a register tile: upcasts of at most two dims)
      if len(opts) < 2 and r.size % n == 0 and _reused(sink, r) and enough_threads and _may_be_lanes(sink, r):
        opts.append(Opt(AxisType.UPCAST, r, n))
  tile = bool(red and opts)  # (the upcasts made with a reduce are a tile's)
  # a row's outputs, after its reduces: vectors
  row_outputs = bool(red and glob) and not any(glob[-1] in u.src[0].toposort for u in reduces)
  if row_outputs and not tile and _unit_stride(sink, glob[-1]):
    if amount := _filled(glob[-1].size, target): opts.append(Opt(AxisType.UPCAST, glob[-1], amount))
  # a CPU sum unrolled by four vectors (or two, where four don't divide it) keeps as many vector accumulators: adds
  # in flight side by side, not one by one. Under a tile whose lanes are outputs: by 4. Under a tile of rows alone (a
  # matrix read along its rows, times a vector or x @ w.T too small to pack): by one vector, as the rows are the
  # accumulators side by side (a 512 x 784 matrix times a vector: 1.5x)
  for r in inner:
    if target.gpu or (tile and vectors): amount = 4
    elif tile: amount = _filled(r.size, target)
    else: amount = next((k * w for k in (4, 2) if r.size % (k * w) == 0), 0) or _filled(r.size, target)
    if amount and r.size % amount == 0: opts.append(Opt(AxisType.UNROLL, r, amount))
  return opts

def _filled(n:int, target:Target) -> int:  # the widest vector, up to the device's, that n elements fill (0: none)
  return next((v for v in reversed(widths) if v <= target.width and n % v == 0), 0)

def _reused(sink:UOp, r:UOp) -> bool:  # a reduce that moves along r reads an input that doesn't: upcasting r reuses it
  return any(u.op is Ops.REDUCE and r in u.src[0].toposort and
             any(x.op is Ops.LOAD and x.buf.op is Ops.PARAM and r not in x.addr.toposort for x in u.src[0].toposort)
             for u in sink.toposort)
def _moves_with(sink:UOp, r:UOp, other:UOp) -> bool:  # a load that moves along other moves along r too
  return any(x.op is Ops.LOAD and other in x.addr.toposort and r in x.addr.toposort for x in sink.toposort)
def _may_be_lanes(sink:UOp, r:UOp) -> bool:
  """Whether r may be vector lanes: not where reread keeps a row on the stack (a DEFINE_LOCAL) that a load reads
  without r, as the stack holds one row, one value a column."""
  return not any(u.op is Ops.LOAD and u.buf.op is Ops.DEFINE_LOCAL and r not in u.addr.toposort for u in sink.toposort)
def _unit_stride(sink:UOp, r:UOp) -> bool:  # every store along r has address r + (terms without r)
  return all([t for t in st.addr.terms() if r in t.toposort] == [r] for st in sink.src if r in st.addr.toposort)
def _side_by_side(sink:UOp, r:UOp) -> bool:  # every load along r reads the next element as r steps (other ranges at 0)
  def at(addr:UOp, v:int) -> UOp:  # (a constant, unless the address reads memory: a gather's)
    return simplify(substitute(addr, {x: x.const_like(v if x is r else 0) for x in addr.toposort if x.op is Ops.RANGE}))
  def step(addr:UOp) -> int|None:
    a, b = at(addr, 0), at(addr, 1)
    return b.arg - a.arg if a.op is Ops.CONST and b.op is Ops.CONST else None
  return all(step(x.addr) == 1 for x in sink.toposort if x.op is Ops.LOAD and r in x.addr.toposort)

def local_opts(sink:UOp, target:Target) -> list[Opt]:
  """Threads per block on the last (fastest, so coalesced) global axis, and on the one before it when the last is
  short, up to 128 threads within the device's limit; 32 for a matmul, whose reduce reuses its loads (what BEAM chose
  for the bigger matmuls on an H100: a small block spreads a matmul's few threads over more of the SMs)."""
  glob = ranges(sink, AxisType.GLOBAL)
  if not glob or ranges(sink, AxisType.LOCAL) or ranges(sink, AxisType.GROUP): return []  # a group's block: its reduce
  opts, budget = [], min(target.local_max, 32 if any(_reused(sink, r) for r in glob) else 128)
  for r in reversed(glob[-2:]):
    if budget >= 2: opts.append(Opt(AxisType.LOCAL, r, min(budget, r.size)))
    budget //= min(budget, r.size)
  return opts

def tile_order(sink:UOp, target:Target) -> list[Opt]:
  """A matmul's rows run inside its columns where each step of its reduce reads more of b (what doesn't move along
  the rows) than of a: b's tile, the wider, then stays in cache while every tile of rows reads it, and a is what is
  read again, once per tile of columns. Rows outside read all of b once per tile of rows: a 1024 matmul's 4 MB, past
  a 2 MB L2, 256 times. (A GLOBAL split of a whole range makes it a new output loop, inside the others.)"""
  glob = ranges(sink, AxisType.GLOBAL)
  if len(glob) < 2 or glob[-1].size == 1: return []
  loads = [x for u in sink.toposort if u.op is Ops.REDUCE for x in u.src[0].toposort
           if x.op is Ops.LOAD and x.buf.op is Ops.PARAM]  # what the reduces read
  def lanes(r:UOp) -> int:  # the most lanes of one load a reduce reads that doesn't move along r
    return max((prod(x.size for x in ld.addr.toposort if x.op is Ops.RANGE and x.kind is AxisType.UPCAST)
                for ld in loads if r not in ld.addr.toposort), default=0)
  rows, cols = glob[-2:]
  return [Opt(AxisType.GLOBAL, rows, rows.size)] if lanes(rows) > lanes(cols) > 0 else []

def thread_opts(sink:UOp, target:Target) -> list[Opt]:
  """CPU threads split an output loop into one chunk per core, when there is work enough to pay for them: a
  handoff to the pool costs a few microseconds, about what 250,000 cached floats take to add up, or 10,000 exps."""
  glob, reduces = ranges(sink, AxisType.GLOBAL), [u for u in sink.toposort if u.op is Ops.REDUCE]
  reduced, free = {r for u in reduces for r in u.src[1:]}, free_ranges(sink)
  # the outputs, and each reduce's loop once per value of the loops around it (a row's max: once a row), times the
  # kernel's float operations (after approximations: a CPU's exp2 is some 35), a rough weight for every loop of it
  work = prod(r.size for r in ranges(sink) if r not in reduced) + \
    sum(prod(r.size for r in free[u]) * prod(r.size for r in u.src[1:]) for u in reduces)
  ops = sum(1 for u in sink.toposort if u.op in GroupOp.ALU and dtypes.is_float(u.dtype))
  if work * max(ops, 1) < 2**18 * target.cores: return []
  # the outermost loop that every reduce moves along, so no two threads compute one reduce (never a row's columns),
  # else the outermost; in whole chunks: a tail would gate every load of the loop
  candidates = [r for r in glob if all(r in free[u] for u in reduces)] or glob[:1]
  for r in candidates:
    if chunks := next((t for t in range(min(target.cores, r.size), 1, -1) if r.size % t == 0), None):
      return [Opt(AxisType.THREAD, r, chunks)]
  return []

# BEAM=n: the opts of each new kernel searched by timing candidates on the device itself, as tinygrad's BEAM does. The
# program found goes to the disk cache under BEAM=n, so a kernel is searched once per machine.
class Timed(NamedTuple):  # a kernel the search ran: its time, its graph with the opts applied, the opts, its program
  time: float
  sink: UOp
  opts: tuple[Opt, ...]
  prog: Program

def beam(sink:UOp, ast:UOp, device:str, width:int) -> Program:
  """From no opts, each step extends each of the `width` fastest kernels of the last by one more opt (candidates),
  times every new one, and keeps the `width` fastest; it stops when a step finds none faster than the last. The
  heuristic's kernel is timed too, so a search never picks a slower one."""
  target = Device.target(device)
  bufs = [Buffer(device, u.arg.size, u.dtype) for u in params(ast)]
  def timed(cands:list[tuple[UOp, tuple[Opt, ...]]]) -> list[Timed]:  # those that ran, fastest first
    progs = [finish(*launch_opts(s, opts, target), ast, target) for s, opts in cands]
    # compiles side by side (a pool per process: a forked child has none of its parent's threads)
    fns = compile_pool(os.getpid()).map(lambda p: _tried(Device[device].program, p), progs)
    times = [_tried(_time, fn, p, bufs) if fn else None for fn, p in zip(fns, progs)]
    ran = [Timed(t, s, opts, p) for (s, opts), p, t in zip(cands, progs, times) if t is not None]
    return sorted(ran, key=lambda c: c.time)
  def extended(beams:list[Timed]) -> list[tuple[UOp, tuple[Opt, ...]]]:  # the kernels kept, each with one more opt
    return [(apply_opt(c.sink, o), c.opts + (o,)) for c in beams[:width] for o in candidates(c.sink, target)]
  beams = timed([(sink, ())])
  while True:  # one more opt while that is faster
    found = timed(extended(beams))
    if not found or (beams and found[0].time >= beams[0].time): break
    beams = found
  prog = finish(*optimize(sink, target), ast, target)  # the heuristic's: its errors are no candidate's, so they raise
  if not beams: return prog
  heuristic_time = _time(Device[device].program(prog), prog, bufs)
  return beams[0].prog if beams[0].time < heuristic_time else prog

def candidates(sink:UOp, target:Target) -> list[Opt]:
  """Each split one more opt may make: vector lanes or unrolled copies (up to 64 in all) that divide a range still
  whole; on a GPU, threads on an output range or across a reduction (a range's tail past the last block is gated), where
  no opt made threads yet, and a matmul of 16-bit floats on tensor cores, before any other; no output lanes beside a
  group. (A group folds in shared memory with one slot per thread of its own range: a second set of threads would race
  on it. A row program's block, whose reduces and columns take turns on one thread id, is the heuristic's.)"""
  if any(u.op is Ops.WMMA for u in sink.toposort): return []  # (a warp's tiles are laid out as the device's)
  rs = ranges(sink)
  # tensor cores first or never: their tiles take whole ranges
  cores = [] if any(r.kind not in (AxisType.GLOBAL, AxisType.REDUCE) for r in rs) else tensor_core_opts(sink, target)
  lanes = prod(r.size for r in rs if r.kind in (AxisType.UPCAST, AxisType.UNROLL))
  blocks = target.gpu and not any(r.kind in (AxisType.LOCAL, AxisType.GROUP, AxisType.COLUMN) for r in rs)
  # (outputs in lanes beside a block's shared reduce: each lane read the other's result)
  lanes_out = [] if any(r.kind is AxisType.GROUP for r in rs) else [AxisType.UPCAST]
  kinds = {AxisType.GLOBAL: lanes_out + ([AxisType.LOCAL] if blocks else []),
           AxisType.COLUMN: lanes_out,
           AxisType.REDUCE: [AxisType.UNROLL] + ([AxisType.GROUP] if blocks else [])}
  def fits(kind:AxisType, r:UOp, n:int) -> bool:
    if kind is AxisType.UPCAST: return r.size % n == 0 and lanes * n <= 64 and _may_be_lanes(sink, r)
    if kind is AxisType.UNROLL: return r.size % n == 0 and lanes * n <= 64
    return n <= target.local_max
  return cores + [Opt(kind, r, n) for r in rs for kind in kinds.get(r.kind, ()) for n in (2, 4, 8, 16, 32, 64, 128, 256)
                  if n < r.size and fits(kind, r, n)]

def _tried(fn:Callable, *args):  # a candidate that fails to compile or to launch (too many registers, say) is none
  try: return fn(*args)
  except RuntimeError: return None  # (CompileError is one, and each runtime's errors)

def _time(fn:Callable, prog:Program, bufs:list[Buffer]) -> float:
  return min(fn(*[b.buf for b in bufs], global_size=prog.global_size, local_size=prog.local_size, wait=True)
             for _ in range(3))

# ---------------------------------------------------------------------------------------------------------------------
# Lowering, step 5: from ranges to a program. Lanes replace upcast/unroll ranges, thread ids replace global/local
# ranges on GPUs, reductions become accumulators, and a vector's lanes at consecutive addresses become one access.

def to_lanes(sink:UOp, target:Target) -> UOp:
  """Upcast and unrolled ranges become lanes. The one most float loads and stores run along, from an aligned base,
  becomes the lanes of vectors (as_vectors): one load, op or store for all of them. Any other upcast/unroll range of n
  is n copies of the code with the range set to 0..n-1: the compiler sees lanes. Unrolled lanes of a reduce each get
  an accumulator, combined after the loop: n independent chains of adds, not one; with upcast outputs (a matmul tile,
  already many accumulators) the lanes combine inside the loop. The copies keep the ranges' ids (a new id would
  reorder every sum it is in), so one simplify, after them all, puts each sum in its order."""
  for r, w in vector_ranges(sink, target):
    sink, lane = split_lanes(sink, r, w)
    sink = as_vectors(sink, lane, target.renderer)
  def lanes(u:UOp, rs:list[UOp]) -> list[UOp]:  # u at each value of rs; a node that doesn't use rs is not copied
    values = list(itertools.product(*[range(r.size) for r in rs]))
    n = len(values)
    copies = {r: [r.const_like(v[i]) for v in values] for i, r in enumerate(rs)}  # range -> its value in each copy
    for x in u.toposort:
      if x not in copies and any(s in copies for s in x.src):
        per_source = [copies.get(s, [s] * n) for s in x.src]  # each source's n copies (a shared one, repeated)
        copies[x] = [x.replace(src=src) for src in zip(*per_source)]  # copy k reads copy k of each source
    return copies.get(u, [u] * n)
  tile = bool(ranges(sink, AxisType.UPCAST))
  def unroll(u:UOp) -> UOp|None:
    rs = [r for r in u.src[1:] if r.kind is AxisType.UNROLL]
    if not rs: return None
    rest, vals = tuple(r for r in u.src[1:] if r not in rs), lanes(u.src[0], rs)
    if not rest: return _combine(u.arg, vals)
    # in a tile, a chain, not a tree: each product's add fuses with its multiply
    if tile: return u.replace(src=(functools.reduce(lambda a, b: a.alu(u.arg, b), vals),) + rest)
    return _combine(u.arg, [u.replace(src=(v,) + rest) for v in vals])
  sink = graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="u"), unroll)]))
  # each store's copies, over its upcast and unroll ranges newest first, so the newest's copies are outermost: in a
  # matmul tile, b's row vectors, each loaded once and used by every row of a before the next (the registers hold 4
  # of them, not all 16). (A store in a reduce's loop, see reread, has its unrolled lanes too.)
  copied = (AxisType.UPCAST, AxisType.UNROLL)
  return sink.replace(src=tuple(lane for st in sink.src
                                for lane in lanes(st, [r for r in ranges(st)[::-1] if r.kind in copied])))

def _combine(op:Ops, xs:list[UOp]) -> UOp:  # as a tree, log2(n) ops deep: a core runs each level's ops side by side
  # (pairs, and an odd one out goes up a level as it is)
  while len(xs) > 1:
    odd = xs[-1:] if len(xs) % 2 else []
    xs = [a.alu(op, b) for a, b in zip(xs[::2], xs[1::2])] + odd
  return xs[0]

class Candidate(NamedTuple):  # a range for vector lanes, a width, and the float accesses along it from an aligned base
  looped: int  # those in a reduce's loop
  total: int
  range: UOp
  width: int

def vector_ranges(sink:UOp, target:Target) -> list[tuple[UOp, int]]:
  """The upcast and unrolled ranges that become vector lanes, each with the widest width up to the device's that its
  size is a multiple of: first the one the most float loads and stores run along from an aligned base (those in a
  reduce's loop first, then upcasts), then others no value varies with together (a row's max, its sum, its outputs)."""
  # The loads of a reduce that loops count first. A reduce unrolled whole runs in no loop (a scan's triangle): its
  # loads don't claim the lanes, so its outputs take them (or none) and its sums share their partial sums.
  def loops(r:UOp) -> bool: return any(x.kind is not AxisType.UNROLL and x.size > 1 for x in r.src[1:])
  looped = {u for r in sink.toposort if r.op is Ops.REDUCE and loops(r) for u in r.src[0].toposort}
  access = [u for u in sink.toposort if u.op in (Ops.LOAD, Ops.STORE)]
  def candidate(r:UOp, w:int) -> Candidate:
    vectors = [u for u in access if _contiguous(u, r, w)]
    return Candidate(sum(u in looped for u in vectors), len(vectors), r, w)
  filled = [(r, _filled(r.size, target)) for r in ranges(sink, AxisType.UPCAST) + ranges(sink, AxisType.UNROLL)]
  found = [candidate(r, w) for r, w in filled if w]
  varying = [f for u, f in free_ranges(sink).items() if u is not sink]  # the ranges each value varies with
  chosen = []
  # the most accesses first (stable: the first of equals, an upcast)
  for c in sorted(found, key=lambda c: (c.looped, c.total), reverse=True):
    apart = not any(c.range in f and r in f for f in varying for r, _ in chosen)  # no value varies with it and a chosen
    if c.total and apart: chosen.append((c.range, c.width))
  return chosen

def _contiguous(u:UOp, lane:UOp, w:int) -> bool:  # a float access at an aligned base + lane, one gate for all lanes
  float_memory = u.buf.op in (Ops.PARAM, Ops.DEFINE_LOCAL) and u.buf.dtype == dtypes.float
  return float_memory and _aligned(u.addr, lane, w) and (u.gate is None or lane not in u.gate.toposort)

def split_lanes(sink:UOp, r:UOp, w:int) -> tuple[UOp, UOp]:  # r as copies * w + lane: the kernel, and the lane range
  if r.size == w: return sink, r
  sink = apply_opt(sink, Opt(r.kind, r, w))
  return sink, ranges(sink, r.kind)[-1]  # the split's inner range: made last

def as_vectors(sink:UOp, lane:UOp, dialect:Renderer) -> UOp:
  """Code that uses the lane range computes its w lanes at once. A float access at an aligned base + lane is a vector
  load or store; an op the dialect has on vectors (CUDA has none) is a vector op, a value the lanes share broadcast; a
  reduce is a vector accumulator, and one over the lanes themselves adds its lanes up after the loop. Anything else
  runs lane by lane: w copies reading their sources' lanes (one lane of a vector, or the lane's own copy)."""
  w, ops = lane.size, dialect.vector_ops
  # node -> a vector or a tuple of its w lanes; one that doesn't vary with the lane (a vector an earlier call made
  # along another range, say) keeps its value, with sources rebuilt where it reads a reduce over the lanes
  done: dict[UOp, UOp|tuple] = {}
  def vector(x:UOp) -> UOp|tuple:
    vec = None if x.dtype is None else x.dtype.vec(w)
    if x is lane: return tuple(lane.const_like(k) for k in range(w))
    if x.op in (Ops.LOAD, Ops.STORE, Ops.PREFETCH) and _contiguous(x, lane, w):
      base = substitute(x.addr, {lane: lane.const_like(0)})  # (simplify folds the + 0)
      srcs = (x.buf, base, _whole(done[x.value], w)) if x.op is Ops.STORE else (x.buf, base)
      return UOp(x.op, vec, srcs).gated(x.gate)
    if x.op is Ops.REDUCE and lane in x.src[1:]:  # over the lanes: reduce each lane, then add the lanes up
      rest = tuple(r for r in x.src[1:] if r is not lane)
      part = done[x.src[0]] if not rest else vector(x.replace(src=(x.src[0],) + rest))  # over the other ranges first
      return _combine(x.arg, [_lane(part, k) for k in range(w)])
    # a reduce is a vector as the op it combines with is; index dtypes have no vector types, so index math stays lanes
    op = x.arg if x.op is Ops.REDUCE else x.op
    if op in ops and vec in vector_types and any(_is_vector(done[s]) for s in x.src):
      if x.op is Ops.REDUCE: return UOp(Ops.REDUCE, vec, (done[x.src[0]],) + x.src[1:], x.arg)
      if all(s.dtype.vec(w) in vector_types for s in x.src) and not _guarded(x):
        return UOp(x.op, vec, tuple(_whole(done[s], w) for s in x.src), x.arg)
    return tuple(x.replace(src=tuple(_lane(done[s], k) for s in x.src)) for k in range(w))
  varies = free_ranges(sink)
  for x in sink.toposort[:-1]:
    if lane in varies[x] or (x.op is Ops.REDUCE and lane in x.src[1:]): done[x] = vector(x)
    else: done[x] = x if all(done[s] is s for s in x.src) else x.replace(src=tuple(done[s] for s in x.src))
  def each(v:UOp|tuple) -> tuple: return v if isinstance(v, tuple) else (v,)  # a store's lane copies, or itself
  return sink.replace(src=tuple(st for s in sink.src for st in each(done[s])))

def _is_vector(v:UOp|tuple) -> bool: return not isinstance(v, tuple) and v.dtype is not None and v.dtype.count > 1
def _lane(v:UOp|tuple, k:int) -> UOp:  # lane k of a value as_vectors made: a copy's, a vector's, or the shared one
  if isinstance(v, tuple): return v[k]
  return UOp(Ops.GEP, v.dtype.scalar, (v,), k) if v.dtype.count > 1 else v
def _whole(v:UOp|tuple, w:int) -> UOp:  # the same value as one vector
  if isinstance(v, tuple): return UOp(Ops.VECTORIZE, v[0].dtype.vec(w), v)
  return v if v.dtype.count > 1 else UOp(Ops.VECTORIZE, v.dtype.vec(w), (v,) * w)

def to_gpu(sink:UOp) -> UOp:
  """Ranges become a GPU launch: global ranges block ids, local and group ranges thread ids. The kernel is simplified
  before store_once asks which thread ids a stored value uses."""
  sink = fit_grid(sink)
  ids = thread_ids(sink)  # before share_reductions, whose shared memory ties every thread of a group to its result
  for step in (share_reductions, lambda s: substitute(s, ids), simplify, store_once): sink = step(sink)
  return sink

def fit_grid(sink:UOp) -> UOp:  # a grid has 3 dims, y and z of at most 65535 blocks: merge the outer ones until it fits
  glob = ranges(sink, AxisType.GLOBAL)
  while len(glob) > 3 or any(r.size > 65535 for r in glob[1:]):
    sink = merge(sink, glob[0], glob[1])
    glob = ranges(sink, AxisType.GLOBAL)
  return sink

def share_reductions(sink:UOp) -> UOp:
  """A group range splits its reduction across a block: each thread reduces its strided share (neighbours read
  neighbours: coalesced) and writes it to shared memory; then, a barrier between steps, the first half of the threads
  folds in the second half, log2(n) steps, until the block's result is at 0."""
  def group(u:UOp) -> UOp|None:
    grp = [r for r in u.src[1:] if r.kind is AxisType.GROUP]
    if not grp: return None
    g, rest = grp[0], tuple(r for r in u.src[1:] if r not in grp)
    partial = u.replace(src=(u.src[0],) + rest) if rest else u.src[0]
    local = UOp(Ops.DEFINE_LOCAL, u.dtype, (), Local(g.arg.id, g.size))
    barrier = UOp(Ops.BARRIER, u.dtype, (local, UOp(Ops.STORE, None, (local, g, partial))))
    half = g.size // 2
    while half:
      live = g < half
      other = UOp(Ops.LOAD, u.dtype, (barrier, g + half, live))  # (a load of a BARRIER: the memory after it)
      pair = UOp(Ops.LOAD, u.dtype, (barrier, g)).alu(u.arg, other)
      barrier = UOp(Ops.BARRIER, u.dtype, (local, UOp(Ops.STORE, None, (local, g, pair, live))))
      half //= 2
    return UOp(Ops.LOAD, u.dtype, (barrier, g.const_like(0)))
  return graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="u"), group)]))

def thread_ids(sink:UOp) -> dict[UOp, UOp]:
  """Global ranges read the block's id, local and group ranges the thread's. Ranges of one size that run in turn (no
  value varies with two: a row's reduces, then its columns) are one thread id, each dim x, y, z a list of them."""
  free, ids = free_ranges(sink).values(), {}
  def in_turn(r:UOp, d:list[UOp]) -> bool:  # no value varies with r and a range of d together: they run in turn
    return not any(r in f and s in f for f in free for s in d)
  id_of = {AxisType.GLOBAL: (AxisType.GLOBAL,), AxisType.LOCAL: (AxisType.LOCAL, AxisType.GROUP)}  # id kind: ranges
  for id_kind, range_kinds in id_of.items():
    dims: list[list[UOp]] = []
    for r in (r for k in range_kinds for r in ranges(sink, k)):
      dim = next((d for d in dims if d[0].size == r.size and in_turn(r, d)), None)  # the first of r's size that can
      if dim is None: dims.append([r])  # a dim of its own
      else: dim.append(r)
    ids.update({r: r.replace(op=Ops.SPECIAL, arg=ThreadId(id_kind, i)) for i, d in enumerate(dims) for r in d})
  return ids

def store_once(sink:UOp) -> UOp:  # every thread of a block holds its reduction's result: thread 0 stores it
  def once(st:UOp) -> UOp:
    idle = [s for s in st.value.toposort
            if s.op is Ops.SPECIAL and s.kind is AxisType.LOCAL and s not in st.addr.toposort]
    return st.gated(all_of(*[s.alu(Ops.CMPEQ, s.const_like(0)) for s in idle]))
  return sink.replace(src=tuple(once(st) for st in sink.src))

def to_cpu(sink:UOp) -> UOp:
  """The thread range becomes the kernel's core argument; every other range stays a loop."""
  thread = ThreadId(AxisType.THREAD, 0)
  return substitute(sink, {r: r.replace(op=Ops.SPECIAL, arg=thread) for r in ranges(sink, AxisType.THREAD)})

output_loops = (AxisType.GLOBAL, AxisType.COLUMN)  # the ranges left that loop over outputs (the rest: reduces')

def to_accumulators(sink:UOp) -> UOp:
  """REDUCE(x, ranges) -> acc = identity; for (ranges) acc = acc op x; then read acc. Reduces over the same ranges
  (the lanes of an upcast output) share one loop, each lane with its own register. The accumulator lives inside the
  output loops its value depends on, so it starts again for each of their elements: a row's max, read by every
  column of the row, is computed once a row."""
  free, done, numbers = free_ranges(sink), {}, itertools.count()
  # groups in the order of their last reduce (toposort's), so that a reduce another group's body reads has its loop
  # made first, even where its group holds a reduce made before (a cumsum's, inside a sum's unrolled loop)
  groups: OrderedDict[tuple, list[UOp]] = OrderedDict()
  for u in sink.toposort:
    if u.op is Ops.REDUCE:
      rs = tuple(sorted(u.src[1:], key=lambda r: r.arg.id))
      groups.setdefault(rs, []).append(u)
      groups.move_to_end(rs)
  # a store that varies with a reduce's ranges moves into its loop (see reread); one whose reduce nothing reads any
  # more (the outputs that read its values back folded away: a softmax masked to zeros) is dropped
  looped = set().union(*groups)
  sink = sink.replace(src=tuple(st for st in sink.src if all(r in looped or r.kind in output_loops for r in free[st])))
  in_loop = {rs: [st for st in sink.src if free[st] & set(rs)] for rs in groups}
  sink = sink.replace(src=tuple(st for st in sink.src if not any(st in sts for sts in in_loop.values())))
  # acc's value after `after` has run: a loop's range (its iteration), or its END (done). The LOAD's second source is
  # that dependency, not an address: an accumulator is a register
  def read(acc:UOp, after:UOp) -> UOp: return UOp(Ops.LOAD, acc.dtype, (acc, after))
  for rs, us in groups.items():
    loops = tuple(sorted(frozenset().union(*[free[u] for u in us]), key=lambda r: r.arg.id))
    # numbered: two accumulators that start alike are still two
    accs = [UOp(Ops.DEFINE_ACC, u.dtype, (identity(u.arg, u.dtype),) + loops, next(numbers)) for u in us]
    # the update reads the accumulator in this iteration of the innermost loop, so it runs in the loop even where the
    # value it adds doesn't depend on it
    current = [read(acc, rs[-1]) for acc in accs]
    body = tuple(UOp(Ops.ASSIGN, acc.dtype, (acc, value.alu(u.arg, substitute(u.src[0], done))) + rs)
                 for acc, value, u in zip(accs, current, us)) + tuple(substitute(st, done) for st in in_loop[rs])
    for r in reversed(rs): body = (UOp(Ops.END, None, (r,) + body),)
    done.update({u: read(acc, body[0]) for acc, u in zip(accs, us)})
  return substitute(sink, done)

def after_stores(sink:UOp) -> UOp:
  """A buffer the kernel both stores into and loads (see reread) is written in the order the kernel's stores were
  made, each load after them: a load reads a BARRIER(buffer, what it waits for), a store writes through one, so that
  linearize places it after. What writes a buffer, in order: each reduce's loop that stores into it (its outermost
  END, which toposort meets after the ENDs inside it), then each store outside loops, unless its value loads the
  buffer (that load can't wait for its store). Each waits for the one before it (a zero of a softmax's tril, which
  reads nothing back, for the row's values reread's loop stored there), and a load for the last."""
  loaded = {x.memory for x in sink.toposort if x.op is Ops.LOAD}
  writers: dict[UOp, list[UOp]] = defaultdict(list)  # a buffer -> what writes it, in order
  for end in (u for u in sink.toposort if u.op is Ops.END):
    for buf in {st.buf for st in end.src[1:] if st.op is Ops.STORE} & loaded: writers[buf].append(end)
    for buf, ws in writers.items(): ws[:] = [end if w in end.src else w for w in ws]  # (the loop around)
  def reads_itself(st:UOp) -> bool: return any(x.op is Ops.LOAD and x.buf is st.buf for x in st.value.toposort)
  for st in sink.src:
    if st.op is Ops.STORE and st.buf in loaded and not reads_itself(st): writers[st.buf].append(st)
  def after(x:UOp, waits:UOp) -> UOp: return x.replace(src=(UOp(Ops.BARRIER, x.buf.dtype, (x.buf, waits)),) + x.src[1:])
  ordered, last = {}, {}  # a store -> it, after the writer before it; a buffer -> its last writer
  for buf, ws in writers.items():
    last[buf] = ws[0]
    for w in ws[1:]: last[buf] = ordered[w] = after(w, last[buf]) if w.op is Ops.STORE else w
  return substitute(sink, ordered | {x: after(x, last[x.buf]) for x in sink.toposort
                                     if x.op is Ops.LOAD and x.buf in last})

# bfloat16 is a storage type: each op on it runs in float32 and rounds back, as torch computes it. On every device:
# C has no bfloat16 arithmetic, and a GPU's scalar bfloat16 math is no faster than its float32.
def _bfloat16_via_float32(u:UOp) -> UOp|None:
  if u.dtype != dtypes.bfloat16 and all(s.dtype != dtypes.bfloat16 for s in u.src): return None
  out = UOp(u.op, dtypes.float if u.dtype == dtypes.bfloat16 else u.dtype,
            tuple(s.cast(dtypes.float) if s.dtype == dtypes.bfloat16 else s for s in u.src), u.arg)
  return out.cast(u.dtype)
bfloat16_in_float32 = PatternMatcher([(UPat(GroupOp.ALU, name="u"), _bfloat16_via_float32)])
def in_float32(sink:UOp) -> UOp: return graph_rewrite(sink, bfloat16_in_float32)

def narrow_index(sink:UOp) -> UOp:
  """Index math was exact until here: it becomes int where every value provably fits in 32 bits, else long, so a
  kernel over more than 2**31 elements never wraps and every other keeps 32-bit math. Thread ids are launch dims and
  stay int, widened where they are used."""
  wide = any(not -2**31 <= u.vmin <= u.vmax < 2**31 for u in sink.toposort if u.dtype == dtypes.index)
  index = dtypes.long if wide else dtypes.int
  def narrow(_, u:UOp) -> UOp:
    if u.op is Ops.SPECIAL: return UOp(Ops.SPECIAL, dtypes.int, (UOp.const(dtypes.int, u.size),), u.arg).cast(index)
    return u.replace(dtype=index) if u.dtype == dtypes.index else u
  return rebuild(sink, narrow)

def add_loops(sink:UOp) -> UOp:
  """Output ranges left (on the CPU: all of them; on a GPU: a row's columns) become loops around the stores."""
  body = sink.src
  for r in reversed([r for r in ranges(sink) if r.kind in output_loops]): body = (UOp(Ops.END, None, (r,) + body),)
  return sink.replace(src=body)

# ---------------------------------------------------------------------------------------------------------------------
# Lowering, step 6: stores past the cache, on CPUs that have them, into an output of STREAM_BYTES or more: a kernel
# that writes it whole is done with it, and one that reads it next would find little of it in a cache anyway.
STREAM_BYTES = 2**24
def past_cache(buf:UOp, target:Target) -> bool:  # an output this big, on a CPU that has stores past the cache
  return bool(target.streams) and buf.arg.size * buf.dtype.itemsize >= STREAM_BYTES

def stream(sink:UOp, target:Target) -> UOp:
  """Float vectors stored to a big output this kernel doesn't read go past the cache (x86's non-temporal stores):
  a cached store first reads its line from memory, so a copy moves a third less, and d=a*b+c of 10M floats a fifth
  (1.2x). The renderer ends such a kernel with a fence, which orders them before it returns."""
  if not target.streams: return sink
  nodes = sink.toposort
  read = {u.memory for u in nodes if u.op is Ops.LOAD}
  def streamed(st:UOp) -> bool:
    float_vector = st.value.dtype.count > 1 and st.value.dtype.scalar == dtypes.float
    unread = st.gate is None and st.buf.op is Ops.PARAM and st.buf not in read
    return unread and float_vector and st.value.dtype.itemsize <= target.streams and past_cache(st.buf, target)
  return substitute(sink, {u: u.replace(arg="stream") for u in nodes if u.op is Ops.STORE and streamed(u)})

# ---------------------------------------------------------------------------------------------------------------------
# Lowering, step 7: linearize. The graph becomes one list of UOps in the order they run.

def linearize(sink:UOp) -> list[UOp]:
  """Order the graph into one list: a topological sort that places each node in the innermost loop it needs, opens
  loops as late and closes them as early as it can, so loop-invariant work stays outside. First, the loops each node
  needs: enclosing(r) is loop r and every loop it runs inside (the loop it nests in, the loops its accumulators live
  in); scope[u] is the loops u's sources need, with u's own if it is one; need[u] is scope[u] in the order they nest.
  Then the walk: emit what the open loops allow, close a loop when its work is done, else open the next one needed."""
  order = sink.toposort
  # a reduce over several ranges nests them, END(outer, END(inner, ...)): each inner range -> the outer one
  parent = {s.src[0]: e.src[0] for e in order if e.op is Ops.END for s in e.src[1:] if s.op is Ops.END}
  around: dict[UOp, frozenset] = {}  # a reduce's loop runs inside the loops its accumulators live in
  def body_loops(s:UOp) -> Iterable[UOp]:  # what a node of a reduce's body adds to the loops around it
    if s.op is Ops.END: return around[s.src[0]]  # a nested loop's
    if s.op is Ops.ASSIGN: return s.src[0].src[1:]  # an accumulator's: DEFINE_ACC(identity, *loops)
    return ()  # a store's, a prefetch's: none
  for e in (e for e in order if e.op is Ops.END and e.src[0].kind not in output_loops):
    around[e.src[0]] = frozenset().union(*map(body_loops, e.src[1:]))
  @functools.cache
  def enclosing(r:UOp) -> frozenset:  # r and every loop it runs inside
    outer = [*around.get(r, ())]  # a reduce's loops
    if r in parent: outer.append(parent[r])  # the loop it nests in
    return frozenset({r}).union(*map(enclosing, outer))
  scope: dict[UOp, frozenset] = {}
  for u in order:
    inner = frozenset().union(*[scope[s] for s in u.src]) | (enclosing(u) if u.op is Ops.RANGE else frozenset())
    scope[u] = inner - {u.src[0]} if u.op is Ops.END else inner  # (after its END, a loop is needed no more)
  # loops open in this order: output loops outside, then by how deep they nest, then as they were made
  depth = {r: (r.kind not in output_loops, len(enclosing(r)), r.arg.id) for r in order if r.op is Ops.RANGE}
  need = {u: sorted(scope[u], key=depth.__getitem__) for u in order}
  pos = {u: i for i, u in enumerate(order)}
  closes = {e.src[0]: e for e in order if e.op is Ops.END}
  users: dict[UOp, list[UOp]] = defaultdict(list)
  for u in order:
    for s in set(u.src): users[s].append(u)
  waiting = {u: len(set(u.src)) for u in order}
  # ready to emit, earliest in order first: work by the loops it needs, an END by the loop it closes (ranges: below)
  work: dict[tuple, list[int]] = defaultdict(list)  # each a heap of positions in order
  ends: dict[UOp, list[int]] = defaultdict(list)
  def ready(u:UOp):
    if u.op is Ops.END: heapq.heappush(ends[u.src[0]], pos[u])
    elif u.op not in (Ops.RANGE, Ops.SINK): heapq.heappush(work[tuple(need[u])], pos[u])
  done, out, stack = set(), [], []
  def emit(u:UOp):
    out.append(u)
    done.add(u)
    for c in users[u]:
      waiting[c] -= 1
      if waiting[c] == 0: ready(c)
  for u in order:
    if not u.src: ready(u)
  while len(out) < len(order) - 1:  # (all but the SINK)
    here = work[tuple(stack)]
    if here: emit(order[heapq.heappop(here)])  # work that belongs in the loops open now
    elif stack and ends[stack[-1]]: emit(order[heapq.heappop(ends[stack.pop()])])  # this loop is done: close it
    else:  # open the next loop a waiting node needs
      def waits_inside(u:UOp) -> bool:  # u needs the loops open now, and more
        return u not in done and u.op is not Ops.RANGE and len(need[u]) > len(stack) and need[u][:len(stack)] == stack
      wanted = [need[u][len(stack)] for u in order if waits_inside(u)]
      # of loops side by side, the one the graph closes first: one whose result another's body reads runs before it
      # (a row's max, then the sum that subtracts it, then the row's columns)
      stack.append(min(wanted, key=lambda r: pos[closes[r]]))
      emit(stack[-1])
  return out

# ---------------------------------------------------------------------------------------------------------------------
# Renderers: one algorithm (Renderer.render, through Renderer.lines); a dialect (CPU, CUDA, METAL at the end) is a
# record of strings. Each value is rendered by a rule from its UOp; a value used once is inlined into its user, others
# get a named variable.

class Names(dict):
  """One render call's text of each value so far (ctx[u] in the rules), whose attributes are its dialect's (ctx.types,
  ...), so a rule takes one ctx. A renderer is shared by threads: what a call writes lives here."""
  def __init__(self, dialect:Renderer): self.dialect = dialect
  def __getattr__(self, name:str): return getattr(self.dialect, name)

@dataclass(frozen=True)
class Renderer:
  """A C-style dialect, as data: CPU, CUDA and METAL below; Renderer.render is the one algorithm."""
  name: str
  gpu: bool            # blocks of threads with shared memory, or (the CPU) loops
  kernel: str          # the signature up to the kernel's name; {threads}: threads per block
  param: str           # one buffer parameter: its {type} and {name}
  ids: dict[AxisType, str]        # the variable a block's or a thread's index is read from
  lanes: tuple[str, ...]          # lane k of a vector value, for each lane its vectors may have
  vector: str                     # a vector value of {type} from its {items}
  types: dict[DType, str]
  suffixes: dict[DType, str]      # of int literals
  code_for_op: dict[Ops, Callable]
  local_prefix: str    # before a shared-memory array
  barrier: str
  headers: dict[str|None, tuple[str, ...]]  # lines every kernel starts with (key None), or one whose text uses the key
  # what only some dialects have
  vector_ops: frozenset[Ops] = frozenset()  # ops it computes lane by lane on vectors (CUDA's float4 has none)
  launch_params: tuple[str, ...] = ()        # parameters every kernel takes after its buffers
  approximates: frozenset[Ops] = frozenset()  # transcendentals it computes as float arithmetic (see transcendental)
  buffer_prefix: str = ""  # before a pointer cast to a buffer
  streams: dict[int, str] = field(default_factory=dict)  # a store past the cache (see stream), by the vector's bytes
  fence: str = ""          # the last line of a kernel with such stores: it orders them before the kernel returns
  bitcast: str = "((union {{{src} a; {dst} b;}}){{{x}}}).b"  # x's bits as dst: a union, defined in C and an expression
  tensor_cores: tuple[TensorCore, ...] = ()  # what on_tensor_cores may put a matmul's reduce on
  to_bfloat16: str = "tiny_to_bf16({x})"      # a float x rounded to bfloat16 (see in_float32)
  from_bfloat16: str = "tiny_from_bf16({x})"  # a bfloat16 x as a float

  def render(self, name:str, uops:list[UOp], bufs:list[UOp]) -> str:  # bufs: the kernel's params(), in launch order
    lacks = {u.dtype.name for u in uops if u.dtype is not None and u.dtype.count == 1} - {d.name for d in self.types}
    if lacks: raise DTypeError(f"{self.name} has no {' or '.join(sorted(lacks))}")
    body = self.lines(uops)
    if any(u.op is Ops.STORE and u.arg == "stream" for u in uops): body.append(f"  {self.fence}")
    params = [self.param.format(type=self.types[b.dtype], name=b.arg.name) for b in bufs]
    # a thread id the dialect has no variable for (a CPU core's) is an argument
    params += [f"const int {u.arg.name}" for u in uops if u.op is Ops.SPECIAL and u.kind not in self.ids]
    params += self.launch_params
    signature = f"{self.kernel.format(threads=prod(launch_dims(uops)[1]))} {name}({', '.join(params)})"
    words = set(re.findall(r"\w+", "\n".join([signature, *body])))  # (a header goes in where its key word is used)
    header = list(dict.fromkeys(line for key, lines in self.headers.items() if key is None or key in words
                                for line in lines))
    return "\n".join(header + [signature + " {"] + body + ["}"])

  def lines(self, uops:list[UOp]) -> list[str]:
    uses: dict[UOp, int] = defaultdict(int)
    for u in uops:
      for s in u.src: uses[s] += 1
    # an operand of ?: (or of a guard) is evaluated twice or not at all: it is named, never inlined
    named = {s for u in uops if _guarded(u) or u.op in (Ops.MAX, Ops.WHERE) for s in u.src}
    names, counts, inlined = Names(self), defaultdict(itertools.count), {}
    lines, indent = [], 1
    def fresh(prefix:str) -> str: return f"{prefix}{next(counts[prefix])}"
    for u in uops:
      if u.op in (Ops.PARAM, Ops.SPECIAL): names[u] = u.arg.name
      if u.op is Ops.PARAM or (u.op is Ops.SPECIAL and u.kind not in self.ids): continue  # an argument
      if u.op is Ops.LOAD and u.buf.op is Ops.DEFINE_ACC:  # the value: its variable
        names[u] = names[u.buf]
        continue
      if u.op is Ops.BARRIER: names[u] = names[u.buf]  # shared memory, as it is after the barrier
      if u.op in (Ops.RANGE, Ops.DEFINE_ACC, Ops.DEFINE_LOCAL): names[u] = fresh(_prefixes[u.op])
      if (text := string_rules.rewrite(u, names)) is None:
        raise NotImplementedError(f"the {self.name} renderer has no rule for {u.op.name} of {u.dtype}")
      if u.op is Ops.END: indent -= 1
      nest = 1 + max((inlined.get(s, 0) for s in u.src), default=0)
      if u.op in _statements:
        if text: lines.append("  " * indent + text)  # (the CPU's barrier is "": one thread needs none)
      elif u.op is Ops.CONST: names[u] = text
      elif uses[u] == 1 and u not in named and u.op is not Ops.LOAD and nest <= 16:
        names[u], inlined[u] = text, nest  # inlined, but shallow (compilers parse chains by recursion; people read)
      else:
        names[u] = fresh(_prefixes.get(u.op, "alu"))
        lines.append("  " * indent + f"{self.types[u.dtype]} {names[u]} = {text};")
      if u.op is Ops.RANGE: indent += 1
    return lines

_prefixes = {Ops.RANGE: "ridx", Ops.DEFINE_ACC: "acc", Ops.DEFINE_LOCAL: "temp", Ops.LOAD: "val", Ops.CAST: "cast",
             Ops.GEP: "gep"}
_statements = {Ops.STORE, Ops.PREFETCH, Ops.END, Ops.RANGE, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.DEFINE_LOCAL, Ops.BARRIER,
               Ops.SPECIAL}

# Every value's text is a primary expression (a name, a literal, a call, or parenthesized), so any rule may put it
# next to an operator: a negative constant is (-2), a cast ((int)x), and -a of it never renders as --2.
def _fmt_const(ctx:Names, v, d:DType) -> str:
  if d == dtypes.bool: return "1" if v else "0"
  if d == dtypes.bfloat16: return ctx.to_bfloat16.format(x=_fmt_const(ctx, v, dtypes.float))
  if dtypes.is_float(d):
    if math.isnan(v): text = "NAN"
    elif math.isinf(v): text = "INFINITY" if v > 0 else "-INFINITY"
    else: text = repr(float(v)) + ("" if d == dtypes.double else "f")
    if d not in (dtypes.float, dtypes.double): text = f"({ctx.types[d]}){text}"
  elif v == dtypes.limits(d)[0] and v < 0: text = f"{v + 1}{ctx.suffixes.get(d, '')}-1"  # C has no INT_MIN literal
  else: text = f"{v}{ctx.suffixes.get(d, '')}"
  return f"({text})" if text[0] in "-(" else text

def _by_shift(ctx:Names, u:UOp, a:UOp, b:UOp) -> str|None:
  """a*2**k, a//2**k and a%2**k as a shift or a mask, for an int a >= 0 where a*2**k doesn't reach the sign"""
  n = b.arg
  if not (dtypes.is_int(a.dtype) and a.dtype.itemsize >= 4 and a.vmin >= 0 and n > 0 and n & (n - 1) == 0 and
          a.vmax * n <= dtypes.limits(a.dtype)[1]): return None  # (n & (n - 1) is n without its lowest 1 bit)
  k = n.bit_length() - 1  # n = 2**k
  return {Ops.MUL: f"({ctx[a]}<<{k})", Ops.IDIV: f"({ctx[a]}>>{k})", Ops.MOD: f"({ctx[a]}&{n - 1})"}[u.op]

_infix = {Ops.ADD: "+", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
          Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
c_code_for_op: dict[Ops, Callable] = {
  Ops.NEG: lambda a: f"(-{a})", Ops.SQRT: lambda a: f"sqrt({a})", Ops.EXP2: lambda a: f"exp2({a})",
  Ops.LOG2: lambda a: f"log2({a})", Ops.SIN: lambda a: f"sin({a})", Ops.RECIP: lambda a: f"(1.0f/{a})",
  Ops.MAX: lambda a, b: f"(({a}<{b})?{b}:{a})", Ops.WHERE: lambda a, b, c: f"({a}?{b}:{c})",
  **{op: lambda a, b, symbol=symbol: f"({a}{symbol}{b})" for op, symbol in _infix.items()}}  # (symbol bound now)

# C computes bool, char and half arithmetic in int or float: bring each result back to its type, as the machine would
# (a comparison, a select and a bitwise op of in-range values stay in range)
def _narrow(ctx:Names, u:UOp, code:str) -> str:
  keeps = u.op in GroupOp.Compare | {Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, Ops.WHERE}
  return f"(({ctx.types[u.dtype]}){code})" if u.dtype.itemsize < 4 and not keeps else code

# Where C leaves an op undefined, every dialect renders the result python_alu and _convert define. The guard repeats
# the operands, so they are never inlined into it.
def _guarded(u:UOp) -> bool:
  if u.op in (Ops.IDIV, Ops.MOD): return not (u.src[1].vmin > 0 or u.src[1].vmax < -1)  # b == 0, INT_MIN / -1
  if u.op in (Ops.SHL, Ops.SHR): return not 0 <= u.src[1].vmin <= u.src[1].vmax < 8 * u.dtype.itemsize
  return u.op is Ops.CAST and dtypes.is_float(u.src[0].dtype) and dtypes.is_int(u.dtype)  # nan, inf, out of range

def _wrapping(ctx:Names, u:UOp) -> str|None:
  """Signed + - * whose bounds don't prove it in range: C calls overflow undefined (and gcc folds `x+1 > x` to true),
  so it runs on the unsigned bits, which wrap, as on every GPU and in the emulator. Index math, proven in range,
  stays plain: the compiler may then widen it."""
  result_lo, result_hi = alu_bounds[u.op](*[s.bounds for s in u.src])
  type_lo, type_hi = dtypes.limits(u.dtype)
  if type_lo <= result_lo and result_hi <= type_hi: return None
  unsigned = f"(unsigned {ctx.types[u.dtype]})"
  return f"(({ctx.types[u.dtype]}){ctx.code_for_op[u.op](*[unsigned + ctx[s] for s in u.src])})"

def _divide(ctx:Names, u:UOp) -> str|None:
  """x/0 and x%0 are 0; for a signed x, x%-1 is 0 and x/-1 is -x on the unsigned bits, so INT_MIN/-1 wraps (C calls
  both undefined). A narrower int computes in int, where -x can't overflow."""
  if not _guarded(u): return None
  a, b, signed = ctx[u.src[0]], ctx[u.src[1]], not dtypes.is_unsigned(u.dtype)
  if u.op is Ops.MOD:
    zero_when = f"{b}==0||{b}==-1" if signed else f"{b}==0"  # x%0 is 0; so is x%-1 (INT_MIN%-1 would trap)
    return _narrow(ctx, u, f"(({zero_when})?0:{a}%{b})")
  if not signed: return _narrow(ctx, u, f"({b}==0?0:{a}/{b})")
  typ = ctx.types[u.dtype]
  negated = f"(({typ})(0u-(unsigned {typ}){a}))" if u.dtype.itemsize >= 4 else f"(-{a})"
  return _narrow(ctx, u, f"({b}==0?0:{b}==-1?{negated}:{a}/{b})")

def _shift(ctx:Names, u:UOp) -> str:
  """A signed << shifts the unsigned bits (C leaves a negative one undefined); an amount outside [0, width) shifts
  every bit out: << gives 0, >> gives 0 or -1 by the sign."""
  a, b, bits = ctx[u.src[0]], ctx[u.src[1]], 8 * u.dtype.itemsize
  signed = dtypes.is_int(u.dtype) and not dtypes.is_unsigned(u.dtype)
  wide = ctx.types[dtypes.long if u.dtype.itemsize == 8 else dtypes.int]  # a narrower int shifts as an int
  past_width = f"({a}<0?-1:0)" if u.op is Ops.SHR and signed else "0"  # a shift past the width
  if u.op is Ops.SHR: shifted = f"({a}>>{b})"
  elif signed: shifted = f"(({ctx.types[u.dtype]})((unsigned {wide}){a}<<{b}))"
  else: shifted = f"({a}<<{b})"
  return _narrow(ctx, u, f"((0<={b}&&{b}<{bits})?{shifted}:{past_width})" if _guarded(u) else shifted)

def _cast(ctx:Names, u:UOp) -> str:
  src = ctx[u.src[0]]  # (a 16-bit float converts through float)
  x = {dtypes.half: f"(float){src}", dtypes.bfloat16: ctx.from_bfloat16.format(x=src)}.get(u.src[0].dtype, src)
  if u.dtype == dtypes.bfloat16: return ctx.to_bfloat16.format(x=f"((float)({x}))")
  if not _guarded(u): return f"(({ctx.types[u.dtype]})({x}))"
  lo, hi = dtypes.limits(u.dtype)  # float -> int saturates at the type's limits, and nan is 0
  def edge(v:int) -> str: return _fmt_const(ctx, float(v), dtypes.float)  # powers of two: exact in float
  return (f"({x}!={x}?0:{x}<={edge(lo)}?{_fmt_const(ctx, lo, u.dtype)}:{x}>={edge(hi + 1)}?"
          f"{_fmt_const(ctx, hi, u.dtype)}:({ctx.types[u.dtype]})({x}))")

def _at(ctx:Names, u:UOp) -> str: return f"{ctx[u.buf]}+{ctx[u.addr]}"  # where a LOAD, STORE or PREFETCH is
def _pointer(ctx:Names, u:UOp, dtype:DType) -> str:  # what a LOAD or STORE accesses: one value, or a vector of them
  return f"*(({ctx.buffer_prefix}{ctx.types[dtype]}*)({_at(ctx, u)}))" if dtype.count > 1 else f"*({_at(ctx, u)})"

def _load(ctx:Names, u:UOp) -> str:
  if u.gate is None: return _pointer(ctx, u, u.dtype)
  zero = _fmt_const(ctx, 0, u.dtype.scalar)
  if u.dtype.count > 1: zero = _vector(ctx, u.dtype, [zero] * u.dtype.count)
  return f"({ctx[u.gate]}?{_pointer(ctx, u, u.dtype)}:{zero})"

def _store(ctx:Names, u:UOp) -> str:
  if u.arg == "stream": return ctx.streams[u.value.dtype.itemsize].format(at=_at(ctx, u), value=ctx[u.value])
  store = f"{_pointer(ctx, u, u.value.dtype)} = {ctx[u.value]};"
  return store if u.gate is None else f"if ({ctx[u.gate]}) {{ {store} }}"

def _vector(ctx:Names, dtype:DType, items:list[str]) -> str:
  return ctx.vector.format(type=ctx.types[dtype], items=",".join(items))

# Vectors in C (the CPU dialect's vector ops): C has no ?: on vectors, so a select is bitwise on a mask (a
# comparison's lanes are -1 or 0), int math runs on the unsigned bits (which wrap), and a cast is a conversion
def _select(ctx:Names, mask:str, a:str, b:str, dtype:DType) -> str:
  if dtype.scalar != dtypes.float: return f"(({a}&{mask})|({b}&~{mask}))"
  bits = f"({ctx.types[dtypes.int.vec(dtype.count)]})"
  return f"(({ctx.types[dtype]})(({bits}({a})&{mask})|({bits}({b})&~{mask})))"
def _vector_max(ctx:Names, u:UOp, a:UOp, b:UOp) -> str:  # nan wins, as in python_alu
  x, y = ctx[a], ctx[b]
  if u.dtype.scalar == dtypes.bool: return f"({x}|{y})"  # masks: true (-1) is the smaller int
  return _select(ctx, f"(({x}<{y})|({y}!={y}))" if u.dtype.scalar == dtypes.float else f"({x}<{y})", y, x, u.dtype)
def _vector_cast(ctx:Names, u:UOp) -> str:
  x, to = ctx[u.src[0]], ctx.types[u.dtype]
  if u.dtype.scalar == dtypes.bool: return f"({x}!=0)"
  if u.src[0].dtype.scalar == dtypes.bool: x = f"(-{x})"  # a mask's true is -1
  return f"__builtin_convertvector({x}, {to})"
def _unsigned(ctx:Names, u:UOp) -> str:  # int vector + * - << on the unsigned bits (a shift's amount stays as it is)
  srcs = [f"({ctx.types[dtypes.uint32.vec(u.dtype.count)]}){ctx[s]}" for s in u.src]
  if u.op is Ops.SHL: srcs[1] = ctx[u.src[1]]
  return f"(({ctx.types[u.dtype]}){ctx.code_for_op[u.op](*srcs)})"
int_vectors = tuple(dtypes.int.vec(n) for n in widths)
bool_vectors = tuple(dtypes.bool.vec(n) for n in widths)
vector_rules = [
  (UPat(Ops.WHERE, dtype=vector_types, name="u"), lambda ctx, u: _select(ctx, *[ctx[s] for s in u.src], u.dtype)),
  (UPat(Ops.MAX, dtype=vector_types, src=(UPat.var("a"), UPat.var("b")), name="u"), _vector_max),
  (UPat((Ops.ADD, Ops.MUL, Ops.NEG, Ops.SHL), dtype=int_vectors, name="u"), _unsigned),
  (UPat(Ops.SHR, dtype=int_vectors, name="u"), lambda ctx, u: f"({ctx[u.src[0]]}>>{ctx[u.src[1]]})"),
  (UPat(Ops.CAST, dtype=vector_types, name="u"), _vector_cast),
  (UPat(Ops.BITCAST, dtype=vector_types, name="u"), lambda ctx, u: f"(({ctx.types[u.dtype]})({ctx[u.src[0]]}))"),
  (UPat(Ops.CMPLT, src=(UPat.var("a", dtype=bool_vectors), UPat.var("b"))),
    lambda ctx, a, b: f"(~{ctx[a]}&{ctx[b]})"),  # false < true, where true is the smaller int
  (UPat(Ops.VECTORIZE, dtype=bool_vectors, name="u"),
    lambda ctx, u: f"(-{_vector(ctx, u.dtype, [ctx[s] for s in u.src])})"),  # 1 -> -1
  (UPat(Ops.GEP, src=(UPat(dtype=bool_vectors),), name="u"),
    lambda ctx, u: f"(-{ctx[u.src[0]]}{ctx.lanes[u.arg]})"),  # -1 -> 1
]

string_rules = PatternMatcher(vector_rules + [
  (UPat(Ops.CONST, name="u"), lambda ctx, u: _fmt_const(ctx, u.arg, u.dtype)),
  (UPat((Ops.MUL, Ops.IDIV, Ops.MOD), src=(UPat.var("a"), UPat.cvar("b")), name="u"), _by_shift),
  (UPat((Ops.ADD, Ops.MUL, Ops.NEG), dtype=(dtypes.int, dtypes.long), name="u"), _wrapping),
  # a float's %: C's fmod, exact (C++'s and Metal's too)
  (UPat(Ops.MOD, dtype=(dtypes.float, dtypes.double), src=(UPat.var("a"), UPat.var("b"))),
    lambda ctx, a, b: f"fmod({ctx[a]},{ctx[b]})"),
  (UPat((Ops.IDIV, Ops.MOD), name="u"), _divide),
  (UPat((Ops.SHL, Ops.SHR), name="u"), _shift),
  # a float's max: nan wins, as python_alu's
  (UPat(Ops.MAX, dtype=(dtypes.float, dtypes.half, dtypes.double), src=(UPat.var("a"), UPat.var("b")), name="u"),
    lambda ctx, u, a, b: _narrow(ctx, u, f"((({ctx[a]}<{ctx[b]})|({ctx[b]}!={ctx[b]}))?{ctx[b]}:{ctx[a]})")),
  # a double's: C's double functions (sqrt, exp2, ...), where the CPU dialect's table names float's (sqrtf, ...); its
  # e^x (Tensor.exp's 2**(x * log2(e))) is C's exp, as rounding that product would cost up to |x| ulps (see _exp)
  (UPat(Ops.EXP2, dtypes.double, src=(UPat(Ops.MUL, src=[UPat.var("x"), UPat(Ops.CONST, arg=1 / math.log(2))]),)),
    lambda ctx, x: f"exp({ctx[x]})"),
  (UPat((Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN), dtype=dtypes.double, name="u"),
    lambda ctx, u: c_code_for_op[u.op](ctx[u.src[0]])),
  (UPat(tuple(GroupOp.ALU), name="u"), lambda ctx, u: _narrow(ctx, u, ctx.code_for_op[u.op](*[ctx[s] for s in u.src]))),
  (UPat(Ops.CAST, name="u"), _cast),
  (UPat(Ops.BITCAST, name="u"),
    lambda ctx, u: ctx.bitcast.format(src=ctx.types[u.src[0].dtype], dst=ctx.types[u.dtype], x=ctx[u.src[0]])),
  (UPat(Ops.GEP, name="u"), lambda ctx, u: f"{ctx[u.src[0]]}{ctx.lanes[u.arg]}"),
  (UPat(Ops.VECTORIZE, name="u"), lambda ctx, u: _vector(ctx, u.dtype, [ctx[s] for s in u.src])),
  (UPat(Ops.WMMA, name="u"), lambda ctx, u: f"{TENSOR_CORES[u.arg].function}({', '.join(ctx[s] for s in u.src)})"),
  (UPat(Ops.LOAD, name="u"), _load),
  (UPat(Ops.STORE, name="u"), _store),
  (UPat(Ops.PREFETCH, name="u"), lambda ctx, u: f"__builtin_prefetch({_at(ctx, u)});"),  # (CPUs': reread)
  (UPat(Ops.SPECIAL, name="u"),
    lambda ctx, u: f"int {u.arg.name} = {ctx.ids[u.kind]}.{'xyz'[u.arg.dim]}; /* {u.size} */"),
  (UPat(Ops.RANGE, name="u"),
    lambda ctx, u: f"for ({ctx.types[u.dtype]} {ctx[u]} = 0; {ctx[u]} < {u.size}; {ctx[u]}++) {{"),
  (UPat(Ops.END), lambda ctx: "}"),
  (UPat(Ops.DEFINE_ACC, name="u"), lambda ctx, u: f"{ctx.types[u.dtype]} {ctx[u]} = {ctx[u.src[0]]};"),
  (UPat(Ops.ASSIGN, name="u"), lambda ctx, u: f"{ctx[u.src[0]]} = {ctx[u.src[1]]};"),
  (UPat(Ops.DEFINE_LOCAL, name="u"), lambda ctx, u: f"{ctx.local_prefix}{ctx.types[u.dtype]} {ctx[u]}[{u.arg.size}];"),
  (UPat(Ops.BARRIER), lambda ctx: ctx.barrier),
])

c_types = {dtypes.float: "float", dtypes.double: "double", dtypes.half: "_Float16", dtypes.bfloat16: "unsigned short",
           dtypes.short: "short", dtypes.ushort: "unsigned short", dtypes.int: "int", dtypes.uint32: "unsigned int",
           dtypes.long: "long long", dtypes.ulong: "unsigned long long", dtypes.char: "signed char",
           dtypes.uchar: "unsigned char", dtypes.bool: "_Bool",
           **{d.vec(n): f"{name}{n}" for n in widths for d, name in  # a bool vector is a mask: true is -1
              ((dtypes.float, "float"), (dtypes.int, "int"), (dtypes.uint32, "uint"), (dtypes.bool, "int"))}}

# GCC/Clang vector extensions compute these lane by lane: operators, and selects, casts and bits as vector_rules says
c_vector_ops = frozenset({Ops.NEG, Ops.RECIP, Ops.ADD, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                          Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.WHERE, Ops.CAST, Ops.BITCAST})

# C for the CPU: GCC/Clang vector extensions (vector_size, which gcc accepts, not clang's ext_vector_type) give vectors
# of any width, each declared where a kernel names it (float16 is 16 floats: C's half is _Float16)
CPU = Renderer(
  "CPU", gpu=False, vector_ops=c_vector_ops, kernel="void", param="{type}* restrict {name}",
  ids={}, lanes=tuple(f"[{k}]" for k in range(widths[-1])), vector="({type}){{{items}}}",
  types=c_types, suffixes={dtypes.uint32: "u", dtypes.long: "ll", dtypes.ulong: "ull"},
  code_for_op=c_code_for_op | {Ops.SQRT: lambda a: f"sqrtf({a})", Ops.EXP2: lambda a: f"exp2f({a})",
                               Ops.LOG2: lambda a: f"log2f({a})", Ops.SIN: lambda a: f"sinf({a})"},
  approximates=frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN}), local_prefix="__attribute__((aligned(64))) ", barrier="",
  streams={bits // 8: f"{call}({{at}}, (__m{bits})({{value}}));"
           for bits, call in ((128, "_mm_stream_ps"), (256, "_mm256_stream_ps"), (512, "_mm512_stream_ps"))},
  fence="_mm_sfence();",
  # math.h only where a kernel calls into it: it is a sixth of a small kernel's compile (78 -> 65 ms, gcc 12)
  headers={**dict.fromkeys(("sqrtf", "exp2f", "log2f", "sinf", "sqrt", "exp2", "exp", "log2", "sin", "fmod", "NAN",
                            "INFINITY"), ("#include <math.h>",)), "_mm_sfence": ("#include <immintrin.h>",),
           # a bfloat16 is a float's top half, rounded to the nearest, ties to even; nan stays nan
           "tiny_to_bf16": ("static inline unsigned short tiny_to_bf16(float x) { unsigned int u = "
                            "((union {float f; unsigned int u;}){x}).u; return x != x ? 0x7fc0 : (u + 0x7fff + "
                            "(u >> 16 & 1)) >> 16; }",),
           "tiny_from_bf16": ("static inline float tiny_from_bf16(unsigned short b) "
                              "{ return ((union {unsigned int u; float f;}){(unsigned int)b << 16}).f; }",),
           **{f"{n}{w}": (f"typedef {t} {n}{w} __attribute__((vector_size({4 * w})));",)
              for t, n in (("float", "float"), ("int", "int"), ("unsigned int", "uint")) for w in widths}})

def _cuda_mma(core:TensorCore) -> tuple[str, ...]:
  """The structs of A's and B's fragments (halves or bfloat16s side by side), and the mma.sync of their 32-bit
  registers, two elements each (the lower half the first), as PTX takes them."""
  scalar, ptx = {dtypes.half: ("half", "f16"), dtypes.bfloat16: ("__nv_bfloat16", "bf16")}[core.dtype]
  structs = []
  for n in core.elements[:2]:
    name, values = f"{core.dtype.name}{n}", [f"x{i}" for i in range(n)]
    args = ", ".join(f"{scalar} {v}" for v in values)
    structs += [f"struct __align__({2 * n}) {name} {{ {scalar} v[{n}]; }};",
                f"__device__ inline {name} make_{name}({args}) " + "{ return {{" + ", ".join(values) + "}}; }"]
  a, b = (f"{core.dtype.name}{n}" for n in core.elements[:2])
  return (*structs, f"__device__ inline float4 {core.function}({a} a, {b} b, float4 c) {{ "
          "const unsigned *x = (const unsigned*)&a, *y = (const unsigned*)&b; "
          f'asm("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, '
          '{%8, %9}, {%0, %1, %2, %3};" : "+f"(c.x), "+f"(c.y), "+f"(c.z), "+f"(c.w) : "r"(x[0]), "r"(x[1]), '
          '"r"(x[2]), "r"(x[3]), "r"(y[0]), "r"(y[1])); return c; }')

CUDA = Renderer(
  "CUDA", gpu=True, kernel='extern "C" __global__ void __launch_bounds__({threads})', param="{type}* {name}",
  ids={AxisType.GLOBAL: "blockIdx", AxisType.LOCAL: "threadIdx"}, lanes=(".x", ".y", ".z", ".w"),
  vector="make_{type}({items})", local_prefix="__shared__ __align__(16) ", barrier="__syncthreads();",
  types=c_types | {dtypes.half: "half", dtypes.bfloat16: "__nv_bfloat16", dtypes.bool: "bool"} |
        {d.vec(n): f"{d.name}{n}" for d in dtypes.narrow for n in (4, 8)},
  suffixes={dtypes.uint32: "u", dtypes.long: "ll", dtypes.ulong: "ull"}, code_for_op=c_code_for_op,
  tensor_cores=CUDA_CORES, bitcast="tiny_bitcast<{dst}>({x})",  # (C++ has no compound literals)
  to_bfloat16="__float2bfloat16_rn({x})", from_bfloat16="__bfloat162float({x})",
  headers={None: ("#define INFINITY (__int_as_float(0x7f800000))", "#define NAN (__int_as_float(0x7fffffff))"),
           "half": ("#include <cuda_fp16.h>",),
           **dict.fromkeys(("__nv_bfloat16", "__float2bfloat16_rn", "__bfloat162float"), ("#include <cuda_bf16.h>",)),
           "tiny_bitcast": ("template <class T, class F> __device__ T tiny_bitcast(F x) "
                            "{ union { F a; T b; } u; u.a = x; return u.b; }",),
           **{core.function: _cuda_mma(core) for core in CUDA_CORES}})

def _metal_simdgroup(core:TensorCore) -> str:  # the lane's elements into 8x8 matrices, and the product's back
  typ = {dtypes.half: "half", dtypes.bfloat16: "bfloat"}[core.dtype]
  def load(m:str, x:str) -> str: return f"{m}.thread_elements()[0] = {x}[0]; {m}.thread_elements()[1] = {x}[1];"
  return (f"float2 {core.function}({typ}2 a, {typ}2 b, float2 c) {{ simdgroup_{typ}8x8 ma, mb; "
          f"simdgroup_float8x8 mc; {load('ma', 'a')} {load('mb', 'b')} {load('mc', 'c')} "
          "simdgroup_multiply_accumulate(mc, ma, mb, mc); return float2(mc.thread_elements()[0], "
          "mc.thread_elements()[1]); }")

METAL = Renderer(
  "METAL", gpu=True, vector_ops=frozenset({Ops.ADD, Ops.MUL, Ops.NEG}), kernel="kernel void",
  param="device {type}* {name}",
  launch_params=("uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"),
  ids={AxisType.GLOBAL: "gid", AxisType.LOCAL: "lid"}, lanes=(".x", ".y", ".z", ".w"), vector="{type}({items})",
  types={d: t for d, t in c_types.items() if d != dtypes.double} |  # (Metal has no double)
        {dtypes.half: "half", dtypes.bfloat16: "bfloat", dtypes.bool: "bool", dtypes.long: "long", dtypes.char: "char",
         dtypes.uchar: "uchar", dtypes.ushort: "ushort", dtypes.uint32: "uint", dtypes.ulong: "ulong"} |
        {d.vec(2): f"{t}2" for d, t in ((dtypes.float, "float"), (dtypes.half, "half"), (dtypes.bfloat16, "bfloat"))},
  suffixes={dtypes.uint32: "u", dtypes.long: "l", dtypes.ulong: "ul"},  # Metal's long is 64 bits; it has no long long
  code_for_op=c_code_for_op | {Ops.SIN: lambda a: f"precise::sin({a})"},
  buffer_prefix="device ", local_prefix="threadgroup __attribute__((aligned(16))) ",
  barrier="threadgroup_barrier(mem_flags::mem_threadgroup);", bitcast="as_type<{dst}>({x})",
  to_bfloat16="bfloat({x})", from_bfloat16="float({x})", tensor_cores=METAL_CORES,
  headers={None: ("#include <metal_stdlib>", "using namespace metal;"),
           **{core.function: (_metal_simdgroup(core),) for core in METAL_CORES}})

# ---------------------------------------------------------------------------------------------------------------------
# Devices: a device is an allocator (freed buffers kept by size, for reuse), a compiler (cached in memory and on disk,
# keyed by source and toolchain, stored as raw bytes: no pickle), and programs.
# Runtimes know drivers; nothing else does.

class CompileError(RuntimeError): pass  # every device's: a runtime's own CompileError is raised again as this one

def runtime(module:str):
  """A GPU runtime: the file beside tiny.py (from tiny's package, if it is in one), never a module of its name that
  sys.path finds first (it is loaded under another name if that one is taken). It imports nothing from tiny."""
  if __package__: return importlib.import_module(f"{__package__}.{module}")
  path = os.path.join(os.path.dirname(os.path.realpath(__file__)), f"{module}.py")
  if (found := sys.modules.get(module)) is not None and os.path.realpath(getattr(found, "__file__", "")) == path:
    return found
  name = f"tiny_{module}" if module in sys.modules else module
  if name not in sys.modules:
    spec = importlib.util.spec_from_file_location(name, path)
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
  return sys.modules[name]

class CPURuntime:
  """Kernels compiled by the system C compiler into a shared library, called through ctypes."""
  # -fno-tree-loop-vectorize: tiny vectorizes for itself, and gcc 12 re-vectorizing a loop that reads
  # backwards sums wrong (the sum of a [:, ::-1] view of 17x2 floats).
  flags = ["-O2", "-shared", "-fPIC", "-fno-math-errno", "-fno-tree-loop-vectorize"]
  kernel = ctypes.CFUNCTYPE(None)  # a void C function; ctypes passes each array it is called with as its address
  def __init__(self):
    self.cc = os.getenv("CC") or "cc"
    self.command = shlex.split(self.cc)  # may carry arguments: "ccache gcc", "gcc -fsanitize=undefined"
    try: version = self.compiler("--version", check=True).stdout.split("\n")[0]
    except (OSError, subprocess.CalledProcessError) as e:
      raise RuntimeError(f"the CPU device compiles kernels with a C compiler, but {self.cc!r} can't run ({e}); "
                         "install gcc or clang, or set $CC to one") from None
    # the cache key names what decides the binary: the compiler's file and version, and the target (what
    # -march=native means on this CPU, by its predefined macros: __AVX512F__ and the like), so a shared cache is safe
    target = self.compiler(*self.flags, "-march=native", "-dM", "-E", "-x", "c", "-")
    if target.returncode == 0: self.flags = [*self.flags, "-march=native"]
    else: target = self.compiler(*self.flags, "-dM", "-E", "-x", "c", "-")
    self.compiler_id = f"{os.path.realpath(shutil.which(self.command[0]) or self.command[0])} {version} " \
                       f"{self.cc} {' '.join(self.flags)} {hashlib.sha256(target.stdout.encode()).hexdigest()}"
    self.width = vector_width(target.stdout)
    self.streams = 4 * self.width if "#define __SSE2__ " in target.stdout else 0  # x86: as wide as its vectors
    self.workers = Workers(self, threads() - 1)
  def compiler(self, *args:str, src:str="", check:bool=False) -> subprocess.CompletedProcess:
    return subprocess.run([*self.command, *args], input=src, capture_output=True, text=True, check=check)
  def compile(self, src:str, *flags:str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "kernel.so")
      proc = self.compiler(*self.flags, *flags, "-x", "c", "-", "-o", out, "-lm", src=src)
      if proc.returncode != 0: raise CompileError(f"{self.cc} failed to compile this kernel:\n{proc.stderr}\n{src}")
      if not os.path.exists(out): raise CompileError(f"{self.cc} exited with success but produced no output:\n{src}")
      with open(out, "rb") as f: return f.read()
  def library(self, src:str, *flags:str) -> int:  # tiny's own C, compiled once (kept in the disk cache) and loaded
    key = f"{self.compiler_id} {' '.join(flags)}\n{src}".encode()
    binary = cache_read(key, ".bin", "compiling it again") or cache_write(key, ".bin", self.compile(src, *flags))
    return self.open(binary)
  def open(self, binary:bytes) -> int:  # a loaded library's handle
    fd, path = tempfile.mkstemp(suffix=".so", dir=scratch())
    with os.fdopen(fd, "wb") as f: f.write(binary)
    try: return _ctypes.dlopen(path, ctypes.DEFAULT_MODE)
    except OSError as e:  # the loader names the file, deleted by now: say whose output it was instead
      raise CompileError(f"{self.cc} built a library that won't load: {str(e).removeprefix(path + ': ')}") from None
    finally: os.unlink(path)  # the loaded library stays mapped
  def load(self, name:str, binary:bytes) -> Callable:
    lib = self.open(binary)
    try: fn = CPURuntime.kernel(_ctypes.dlsym(lib, name))
    except OSError:
      _ctypes.dlclose(lib)
      raise CompileError(f"the C source has no function named {name!r}") from None
    # unmapped once nothing can call into it: what calls fn holds it (run, in Compiled.programs or a RawKernel); ctypes'
    # own CDLL functions live in reference cycles, so they would stay until a gc pass
    weakref.finalize(fn, _ctypes.dlclose, lib).atexit = False
    return CPUProgram(self, fn)
  def graph(self, kernels:list[GraphKernel]) -> Callable[[list], None]|None: return self.workers.graph(kernels)
  def alloc(self, nbytes:int):
    # a big buffer gets its own mapping, so freeing it gives its memory back to the system: malloc might keep it
    if nbytes >= 2**20: return (ctypes.c_uint8 * nbytes).from_buffer(mmap.mmap(-1, nbytes))
    # a vector access may assume its vector's alignment, up to 64 bytes (16 floats), where malloc promises 16
    raw = (ctypes.c_uint8 * (max(nbytes, 1) + 63))()
    return (ctypes.c_uint8 * max(nbytes, 1)).from_buffer(raw, -ctypes.addressof(raw) % 64)
  def free(self, buf): pass
  def copyin(self, buf, src:memoryview): memoryview(buf).cast("B")[:src.nbytes] = src.cast("B")
  def copyout(self, dst:memoryview, buf): dst[:] = memoryview(buf).cast("B")[:dst.nbytes]
  def synchronize(self): pass

class CPUProgram(NamedTuple):
  """A loaded kernel, run on the calling thread, or in chunks across the worker pool (see Workers)."""
  runtime: CPURuntime
  fn: Callable  # the C function: ctypes passes each array it is called with as its address
  def __call__(self, *bufs, global_size=(1,), local_size=(1,), wait=False) -> float:
    start = time.perf_counter()
    if global_size[0] == 1: self.fn(*bufs)
    else: self.runtime.workers.run(self.fn, bufs, global_size[0])
    return time.perf_counter() - start

def vector_width(macros:str) -> int:
  """Floats in a vector register of the CPU a compiler targets, by its predefined macros (cc -dM -E): 16 with
  AVX-512, 8 with AVX, else 4 (SSE, NEON)."""
  return next((w for macro, w in (("__AVX512F__", 16), ("__AVX__", 8)) if f"#define {macro} " in macros), 4)

class Emulator:
  """The PYTHON device: runs the linear UOps of a GPU-lowered kernel, thread by thread, with GPU semantics. Each
  thread is a generator that pauses at a barrier; a block's threads run in turn between barriers, so a kernel that
  reads shared memory without a barrier reads poison (NaN), as a GPU would read garbage. Slow, exact, and the
  reference for GPU lowering on machines with no GPU."""
  local_max = 1024
  def alloc(self, nbytes:int) -> bytearray: return bytearray(nbytes)
  # memory in this process, as the CPU's: the same copies in and out, and nothing runs behind the caller to wait for
  free, copyin, copyout, synchronize = CPURuntime.free, CPURuntime.copyin, CPURuntime.copyout, CPURuntime.synchronize

  def program(self, prog:Program) -> Callable:
    core = next((TENSOR_CORES[u.arg] for u in prog.uops if u.op is Ops.WMMA), None)
    starts = {u: i for i, u in enumerate(prog.uops) if u.op is Ops.RANGE}  # each loop's place, where END jumps back
    def run(*bufs, global_size, local_size, wait=False):
      start = time.perf_counter()
      # each thread runs to its next barrier (or a warp's WMMA, which its lanes get the product of); those that
      # finished leave. (A thread's lane: its index in the block, x fastest, mod 32, as a GPU counts them.)
      lids = [lid[::-1] for lid in itertools.product(*[range(n) for n in local_size[::-1]])]
      for gid in itertools.product(*[range(n) for n in global_size]):
        local = {u: bytearray(b"\xff" * u.arg.size * u.dtype.itemsize) for u in prog.uops if u.op is Ops.DEFINE_LOCAL}
        replies = {run_thread(Thread(prog, bufs, local, gid, lid), starts): None for lid in lids}  # what each is sent
        while replies:
          paused = {}  # each thread that paused -> what it asks: None at a barrier, its fragments at a WMMA
          for t, reply in replies.items():
            with contextlib.suppress(StopIteration): paused[t] = t.send(reply)
          replies = dict.fromkeys(paused)
          if any(paused.values()):  # a WMMA: each warp's lanes get their part of its product
            waiting = list(paused)
            for warp in (waiting[i:i + 32] for i in range(0, len(waiting), 32)):
              replies |= dict(zip(warp, warp_product(core, [paused[t] for t in warp])))
      return time.perf_counter() - start
    return run

@dataclass
class Thread:
  """One thread of the emulator: its ids, the kernel's buffers and its block's shared memory."""
  prog: Program
  bufs: tuple
  local: dict
  gid: tuple
  lid: tuple
  def access(self, u:UOp, vals:dict, lanes:int) -> tuple[bytearray, slice, DType]:
    """The memory a load or store touches, the bytes of its lanes inside the buffer's size, and its dtype. An address
    past the allocation (a buffer's whole vectors, shared memory's declared size) raises: a bad access in lowering."""
    buf, addr = u.memory, vals[u.addr]
    size, shared = buf.arg.size, buf.op is Ops.DEFINE_LOCAL
    if not 0 <= addr <= (size if shared else whole_vectors(size)) - lanes:
      raise IndexError(f"{self.prog.name}: {u.op.name.lower()} at {addr} is outside a buffer of {size}")
    end = max(addr, min(addr + lanes, size))  # lanes past the buffer's size hold no data (an empty slice at worst)
    memory = self.local[buf] if shared else self.bufs[buf.arg.slot]
    return memory, slice(addr * buf.dtype.itemsize, end * buf.dtype.itemsize), buf.dtype
  def load(self, u:UOp, vals:dict):
    """An upcast's last lanes may run past the end into the padding (apply_opt leaves them ungated): out there a lane
    loads poison, as shared memory does, so a kernel that uses one in a result shows NaN; and it stores nothing."""
    if u.buf.op is Ops.DEFINE_ACC: return vals[u.buf]
    n = u.dtype.count
    if u.gate is not None and not vals[u.gate]: out = (dtypes.python(u.dtype.scalar)(0),) * n  # gated off: 0
    else:
      mem, inside, dtype = self.access(u, vals, n)
      out = decoded(dtype, bytes(mem[inside]).ljust(n * dtype.itemsize, b"\xff"))
    return out[0] if n == 1 else out
  def store(self, u:UOp, vals:dict):
    if u.gate is not None and not vals[u.gate]: return
    n, value = u.value.dtype.count, vals[u.value]
    mem, inside, dtype = self.access(u, vals, n)
    mem[inside] = encoded(dtype, value if n > 1 else [value])[:inside.stop - inside.start]

# what each op computes in an emulated thread, from the values computed so far: with exec_alu, this table is the
# emulator's whole semantics
emulated: dict[Ops, Callable[[Thread, UOp, dict], Any]] = {
  Ops.RANGE: lambda t, u, vals: 0, Ops.CONST: lambda t, u, vals: u.arg,
  Ops.DEFINE_ACC: lambda t, u, vals: vals[u.src[0]],
  Ops.SPECIAL: lambda t, u, vals: (t.gid if u.kind is AxisType.GLOBAL else t.lid)[u.arg.dim],
  Ops.LOAD: Thread.load, Ops.STORE: Thread.store, Ops.GEP: lambda t, u, vals: vals[u.src[0]][u.arg],
  Ops.VECTORIZE: lambda t, u, vals: tuple(vals[s] for s in u.src),
  Ops.CAST: lambda t, u, vals: _convert(u.dtype, vals[u.src[0]]),
  Ops.BITCAST: lambda t, u, vals: decoded(u.dtype, encoded(u.src[0].dtype, [vals[u.src[0]]]))[0],
  **{op: lambda t, u, vals: exec_alu(u.op, u.dtype, [vals[s] for s in u.src]) for op in GroupOp.ALU}}

def warp_product(core:TensorCore, fragments:list[tuple]) -> list[tuple]:
  """D = A @ B + C for a warp, from each lane's (A, B, C) elements, and each lane's elements of D: the products summed
  exactly, then rounded to float32 (a device may round on the way)."""
  m, n, k = core.dims
  a, b, c = {}, {}, {}  # (row, column) -> the element a lane holds there
  for lane, fragment in enumerate(fragments):
    for at, tile, values in zip((core.a, core.b, core.c), (a, b, c), fragment):
      tile.update((at(lane, i), v) for i, v in enumerate(values))
  d = {(i, j): truncate(dtypes.float, math.fsum([c[i, j]] + [a[i, x] * b[x, j] for x in range(k)]))
       for i in range(m) for j in range(n)}
  return [tuple(d[core.c(lane, i)] for i in range(core.elements[2])) for lane in range(len(fragments))]

def run_thread(t:Thread, starts:dict[UOp, int]):
  """Step through the linear UOps: loops jump back at END, a barrier yields to the block's other threads."""
  uops, vals, pc = t.prog.uops, {}, 0
  while pc < len(uops):
    u = uops[pc]
    if u.op is Ops.END:
      loop = u.src[0]
      vals[loop] += 1
      if vals[loop] < loop.size:  # back to the loop's first op
        pc = starts[loop] + 1
        continue
    elif u.op is Ops.BARRIER: yield
    elif u.op is Ops.WMMA: vals[u] = yield tuple(vals[s] for s in u.src)  # the warp's product, its lanes' fragments
    elif u.op is Ops.ASSIGN: vals[u.src[0]] = vals[u.src[1]]  # the accumulator takes its update's value
    elif u.op in emulated: vals[u] = emulated[u.op](t, u, vals)
    pc += 1

class Compiled:
  """A device: its runtime, behind two bounded caches that let go of what was used longest ago first: freed buffers
  (by bytes), and loaded programs (LRU_PROGRAMS of them; an evicted program is unloaded once nothing can call it)."""
  def __init__(self, name:str, runtime):
    self.name, self.runtime = name, runtime
    self.free_cache: OrderedDict[int, list] = OrderedDict()  # nbytes -> freed buffers, the size freed longest ago first
    self.cached, self.cache_max = 0, reuse_bytes()
    self.programs: OrderedDict[tuple[str, str], Callable] = OrderedDict()
    self.programs_max = getenv("LRU_PROGRAMS", 1000, least=1)
    # each runtime raises its own module's CompileError (runtimes import nothing from tiny); users catch tiny's
    self.compile_error = sys.modules[type(runtime).__module__].CompileError
    # threads share the caches, and a buffer is freed by whichever thread drops it: reentrant, as a garbage
    # collection inside a locked step may free one
    self.lock = threading.RLock()
  def alloc(self, nbytes:int):
    with self.lock:
      if bufs := self.free_cache.get(nbytes):
        buf = bufs.pop()
        if not bufs: del self.free_cache[nbytes]
        self.cached -= nbytes
        return buf
    try: return self.runtime.alloc(nbytes)
    except (MemoryError, RuntimeError):  # the cache may hold what we need: give it back and try once more
      with self.lock: self.trim(0)
      return self.runtime.alloc(nbytes)
  def free(self, buf, nbytes:int):
    with self.lock:
      self.free_cache.setdefault(nbytes, []).append(buf)
      self.free_cache.move_to_end(nbytes)
      self.cached += nbytes
      if self.cached > self.cache_max: self.trim(self.cache_max)
  def trim(self, limit:int):
    """Frees cached buffers, the size freed longest ago first, until the cache holds at most limit bytes."""
    while self.cached > limit:
      nbytes, bufs = next(iter(self.free_cache.items()))
      self.runtime.free(bufs.pop(0))
      if not bufs: del self.free_cache[nbytes]
      self.cached -= nbytes
  def program(self, prog:Program) -> Callable:
    if (fn := self.loaded(prog)) is not None: return fn
    try: fn = self.runtime.load(prog.name, self.binary(prog))  # unlocked: threads compile new kernels side by side
    except self.compile_error as e: raise CompileError(str(e)) from None
    with self.lock:
      self.programs[(prog.name, prog.src)] = fn
      if len(self.programs) > self.programs_max: self.programs.popitem(last=False)
    return fn
  def binary(self, prog:Program) -> bytes:  # the compiled kernel, from the disk cache when it holds it
    key = f"{self.runtime.compiler_id}\n{prog.src}".encode()
    if (binary := cache_read(key, ".bin", f"compiling {prog.name} again")) is not None: return binary
    if getenv("DEBUG") >= 3: print(f"compile {prog.name} for {self.name}")
    return cache_write(key, ".bin", self.runtime.compile(prog.src))
  def loaded(self, prog:Program) -> Callable|None:  # the program if it is ready to run
    if isinstance(self.runtime, Emulator): return self.runtime.program(prog)  # (it compiles nothing: every one is)
    key = (prog.name, prog.src)
    with self.lock:
      fn = self.programs.get(key)
      if fn is not None: self.programs.move_to_end(key)  # (used now: the last to go)
    return fn

class DeviceKind(NamedTuple):
  dialect: Renderer
  opens: Callable  # its runtime

class _Device:
  """Device["CPU"] opens a device once. DEVICE= picks the default; otherwise the first that opens."""
  # the emulator runs the same lowered UOps as CUDA: its source is the CUDA text, for reading
  kinds = {"CPU": DeviceKind(CPU, CPURuntime), "PYTHON": DeviceKind(CUDA, Emulator),
           "CUDA": DeviceKind(CUDA, lambda: runtime("cuda_rt").CUDADevice()),
           "METAL": DeviceKind(METAL, lambda: runtime("metal_rt").MetalDevice())}
  def __init__(self):
    self.opened: dict[str, Compiled] = {}
    self.lock = threading.Lock()
  def canonical(self, name:str|None) -> str:
    name = (name or self.DEFAULT).upper().removesuffix(":0")  # (a device's first, and only, unit)
    if name not in self.kinds: raise ValueError(f"unknown device {name!r}; tiny has {', '.join(self.kinds)}")
    return name
  def target(self, name:str) -> Target:
    """What lowering for a device needs: its dialect, the block size a GPU reported once opened (before: the 1024
    threads every CUDA and Metal GPU allows), and its vector width: a GPU's float4, or what the CPU's compiler
    targets, with the stores past the cache it has."""
    renderer = self.kinds[name].dialect
    if renderer.gpu:
      local_max = self.opened[name].runtime.local_max if name in self.opened else 1024
      return Target(renderer, local_max, cores=1, width=4)  # (its threads are the launch's, not a pool's)
    return Target(renderer, local_max=1, cores=threads(), width=self[name].runtime.width,
                  streams=self[name].runtime.streams)
  def __getitem__(self, name:str) -> Compiled:
    if (dev := self.opened.get(name)) is not None: return dev  # (a name as opened is canonical)
    name = self.canonical(name)
    with self.lock:  # two threads opening one device at once get the same one, opened once
      if name not in self.opened: self.opened[name] = Compiled(name, self.kinds[name].opens())
    return self.opened[name]
  @functools.cached_property
  def DEFAULT(self) -> str:
    if os.getenv("DEVICE"): return os.environ["DEVICE"].upper()
    for name in (["METAL"] if sys.platform == "darwin" else []) + ["CUDA"]:
      try: self[name]
      except Exception: continue  # no driver, no GPU, or a runtime that won't import: each means "not this one"
      return name
    return "CPU"

Device = _Device()

class Buffer:
  """Memory on a device, allocated on first use and returned to the device's cache when dropped."""
  def __init__(self, device:str, size:int, dtype:DType):
    self.device, self.size, self.dtype, self._buf = device, size, dtype, None
    self.allocated = whole_vectors(size) * dtype.itemsize  # bytes
    self.written = 0  # the tick when a kernel or a copy last wrote it: a value computed from it before is stale
    self.pending: Tensor|None = None  # the tensor whose write into it is pending (assign), until it runs
    # written by an assign: every tensor holding all of it is then an alias of one tensor (before, two tensors of equal
    # graphs may hold it, computed once: each is its own)
    self.assigned = False
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def buf(self):
    if self._buf is None:
      self._buf = Device[self.device].alloc(self.allocated)
      GlobalCounters.mem_used += self.allocated
    return self._buf
  def note_write(self): self.written = next(ticks)
  def copyin(self, src:memoryview):
    Device[self.device].runtime.copyin(self.buf, src)
    self.note_write()
  def copyout(self) -> memoryview:
    if capturing.now is not None:  # (a replay runs kernels only: what the call did with the values, it wouldn't redo)
      raise RuntimeError("a TinyJit function read a tensor's values (item, tolist, numpy, to another device) while it "
                         "was captured: its replays would repeat what it did with them. Read them outside the function")
    out = memoryview(bytearray(self.nbytes))
    Device[self.device].runtime.synchronize()
    Device[self.device].runtime.copyout(out, self.buf)
    return out
  def __del__(self):
    if self._buf is not None and (dev := Device.opened.get(self.device)) is not None:
      dev.free(self._buf, self.allocated)
      GlobalCounters.mem_used -= self.allocated

# ---------------------------------------------------------------------------------------------------------------------
# Running a schedule, and seeing what it would run.

program_cache: dict[tuple[UOp, str, int, int], Program] = {}  # (ast, device, NOOPT, BEAM) -> its program

def to_program(ast:UOp, device:str) -> Program:
  """A kernel lowered for a device: from memory, else from the disk cache (devices that run source: the emulator runs
  UOps), else lowered now. The cache is keyed by the AST node: hash-consed, so an equal AST is the same object."""
  noopt, beam_width = getenv("NOOPT"), getenv("BEAM")
  key = (ast, device, noopt, beam_width)
  if (prog := program_cache.get(key)) is None:
    target = Device.target(device)
    disk_key = f"{tiny_version()} {device} {target.local_max} {target.cores} {target.width} {target.streams} " \
               f"NOOPT={noopt} BEAM={beam_width}\n{ast_text(ast)}".encode()
    if device == "PYTHON": prog = lower(ast, target)  # the emulator runs UOps, which the disk cache doesn't keep
    elif (entry := cache_read(disk_key, ".json", "lowering it again")) is not None: prog = Program.loads(entry)
    else:
      prog = lower(ast, target, device)
      cache_write(disk_key, ".json", prog.dumps())
    program_cache[key] = prog
  return prog

def ast_text(sink:UOp) -> str:  # a graph, the same in every process: a node a line, its sources by their line numbers
  number = {u: i for i, u in enumerate(sink.toposort)}
  return "\n".join(f"{u.op.name} {u.dtype} {u.arg!r} {[number[s] for s in u.src]}" for u in number)

class Launch(NamedTuple):  # one kernel of a run: its program, and where its buffers are among the run's
  device: str
  prog: Program
  slots: list[int]  # outputs first
  output_count: int
  why: str  # why its outputs are stored, for DEBUG=2

def run_schedule(items:list[ScheduleItem], wait:bool=False) -> float:
  """Runs bound kernels in order; with wait (or DEBUG>=2) each is timed on the device, and the total is returned."""
  if not items: return 0.0
  bufs = list(dict.fromkeys(b for item in items for b in item.bufs))
  slots = {b: i for i, b in enumerate(bufs)}
  total = launch(with_programs(prepare(items, bufs[0].device, slots.__getitem__), bufs[0].device), bufs, wait)
  for item in items:
    for u, view in item.outs.items(): remember(u, view)
  return total

def with_programs(launches:list[Launch], device:str) -> Iterator[tuple[Callable, Launch]]:
  """Each kernel with its loaded program, looked up as it launches: the device's cache decides how long one stays."""
  dev = Device[device]
  return ((dev.program(l.prog), l) for l in launches)

class GlobalCounters:
  """tinygrad's: the kernels run since reset(), their operations and bytes moved, and the seconds of those timed (by
  wait, DEBUG=2 or a capture); and the bytes of device memory that buffers hold now."""
  global_ops, global_mem, time_sum_s, kernel_count, mem_used = 0, 0, 0.0, 0, 0  # (mem_used: not reset)
  @staticmethod
  def reset():
    GlobalCounters.global_ops = GlobalCounters.global_mem = GlobalCounters.kernel_count = 0
    GlobalCounters.time_sum_s = 0.0
  @staticmethod
  def ran(kernels:int, ops:int, moved:int, seconds:float):
    GlobalCounters.kernel_count += kernels
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += moved
    GlobalCounters.time_sum_s += seconds

def launch(kernels:Iterable[tuple[Callable, Launch]], bufs:list[Buffer], wait:bool=False) -> float:
  """The one loop every kernel runs through (a plan's, a TinyJit replay's, a RawKernel): each on its buffers, by slot.
  With wait (or DEBUG>=2, or in a TinyJit's capture) each is timed on the device, and the total is returned."""
  debug, capture, total = getenv("DEBUG"), capturing.now, 0.0
  for i, (fn, l) in enumerate(kernels):
    if debug >= 4: print(l.prog.src)
    tm = fn(*[bufs[s].buf for s in l.slots], global_size=l.prog.global_size, local_size=l.prog.local_size,
            wait=wait or debug >= 2 or capture is not None)  # (a buffer is allocated when a kernel first uses it)
    for s in l.slots[:l.output_count]: bufs[s].note_write()
    if capture is not None:
      capture.launches.append((fn, l, [bufs[s] for s in l.slots]))
      capture.seconds += tm
    prog = l.prog
    if debug >= 2:
      print(f"*** {l.device:6s} {i:4d} {prog.name:30s} {l.why:10s} arg {len(l.slots):2d} "
            f"tm {tm*1e6:9.2f}us ({prog.flops/tm*1e-9:8.2f} GFLOP/s {prog.moved/tm*1e-9:8.2f} GB/s) {prog.opts}")
    GlobalCounters.ran(1, prog.flops, prog.moved, tm or 0.0)  # (a launch not asked to wait times nothing: None)
    total += tm or 0.0
  return total

def prepare(items:list[Kernel]|list[ScheduleItem], device:str, slot:Callable[[Any], int]) -> list[Launch]:
  """Each kernel with something to compute lowered and loaded (a GPU can't launch 0 blocks), its buffers by slot (slot:
  where each of an item's bufs is among the launch's: a plan's Slot BUFFER -> its index, a Buffer -> its place). Each
  new one compiles in the background while the next is lowered: a compile is a subprocess, so they run side by side."""
  dev, launches, compiles = Device[device], [], []
  for item in items:
    if all(st.buf.arg.size == 0 for st in item.ast.src): continue  # its outputs hold nothing
    prog = to_program(item.ast, device)
    launches.append(Launch(device, prog, [slot(b) for b in item.bufs], len(item.ast.src), item.why))
    if dev.loaded(prog) is None: compiles.append(compile_pool(os.getpid()).submit(dev.program, prog))
  for c in compiles: c.result()
  return launches

class RawKernel:
  """Hand-written source run through tiny's runtime on any device: users' custom kernels and bench's baselines.
  The source must define `name` taking one pointer per buffer, in order. On the CPU, a global_size[0] of n > 1 calls
  it once per thread, with the thread's index 0..n-1 as one more int argument."""
  def __init__(self, name:str, src:str, global_size=(1,), local_size=(1,), device:str|None=None):
    self.device = (device or Device.DEFAULT).upper()
    self.prog = Program(name, src, [], _xyz(global_size), _xyz(local_size))
    if self.device == "PYTHON":
      raise ValueError("the PYTHON device runs lowered UOps, not source: it has no raw kernels")
    self.fn = Device[self.device].program(self.prog)
  def __call__(self, *tensors:Tensor, wait:bool=True) -> float:
    bufs = [t.buffer() for t in tensors]  # (no outputs named: a TinyJit capture holds every one as it is)
    Tensor._realize_readers({t.uop.src[0] for t in tensors}, *tensors)
    launches = [(self.fn, Launch(self.device, self.prog, list(range(len(bufs))), output_count=0, why="raw"))]
    seconds = launch(launches, bufs, wait)
    for b in bufs: b.note_write()  # (any of them may be written)
    return seconds

def render(*tensors:Tensor, device:str|None=None) -> list[Program]:
  """The kernels that realizing these tensors would run, rendered for any device (present or not); nothing runs."""
  return [to_program(item.ast, Device.canonical(device or tensors[0].device)) for item in schedule(list(tensors))]

# ---------------------------------------------------------------------------------------------------------------------
# TinyJit: a function's kernels, captured once and replayed on new inputs with no Python in between but the launches.

class Place(NamedTuple):  # where a rand call started in its sequence (Tensor._place)
  start: int
  buffer: Buffer

@dataclass
class Capture:
  """One call of a TinyJit's function as it ran: each kernel it launched (its function, launch, and buffers), and
  what it made of Python data: a tensor's, by its hash, and rand's places in the sequence."""
  start: int  # rand's counter when the call began
  launches: list[tuple[Callable, Launch, list[Buffer]]] = field(default_factory=list)
  seconds: float = 0.0  # the time its kernels took on the device, each waited for
  data: list[int|Place] = field(default_factory=list)
  computed: set[UOp] = field(default_factory=set)  # the nodes it realized (see realized_view)
  made: set[Buffer] = field(default_factory=set)  # the buffers it made: a replay makes its own (an assign's target
                                                  # that was there before: a replay writes it again)
  filled: dict[Buffer, bytes] = field(default_factory=dict)  # those it filled with Python data, and the data
  def fingerprint(self) -> Counter:
    """Its data, equal for calls that made the same, in any order (a replay of a jit inside notes its data after its
    rand's places): each hash, and rand's places from where each call began (a tuple: never a data hash)."""
    return Counter((d.start - self.start,) if isinstance(d, Place) else d for d in self.data)

class Capturing(threading.local):
  """The TinyJit call running on this thread, if any. What it changes, where: Tensor's data and rand note what they
  make (Capture.data), Plan.run the buffers it makes (made), launch times each kernel and keeps it (launches), and
  realized_view counts a node realized only if this capture computed it (computed)."""
  now: Capture|None = None
capturing = Capturing()

def signature(x, given:list[Buffer]):
  """A TinyJit argument as the key of its replay sees it: a tensor by its shape, dtype, device and which of the given
  buffers it is (its whole buffer, what a replay binds, added to them), a list, tuple or dict by its items, any other
  value as it is."""
  if isinstance(x, Tensor):
    if (b := x.buffer()) not in given: given.append(b)
    return (Tensor, x.uop.shape, x.uop.dtype, x.device, given.index(b))
  if isinstance(x, dict): return (dict, *[(k, signature(v, given)) for k, v in x.items()])
  if isinstance(x, (list, tuple)): return (type(x), *[signature(item, given) for item in x])
  return (type(x), arg_key(x))  # True, 1 and 1.0 (and 0.0, -0.0) make different constants; nan finds itself

def mapped(x, fn:Callable, leaf:type=Tensor):
  """x with each leaf in it (x itself, or in lists, tuples and dict values, nested) as fn makes it: TinyJit maps a
  function's result so, to realize its tensors, to note where each lies, and to make them anew on a replay."""
  if isinstance(x, leaf): return fn(x)
  if isinstance(x, dict): return {k: mapped(v, fn, leaf) for k, v in x.items()}
  if not isinstance(x, (list, tuple)): return x
  items = [mapped(v, fn, leaf) for v in x]
  return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)  # (a NamedTuple takes its fields one by one)

class TinyJit:
  """tinygrad's TinyJit: `@TinyJit` on a function of tensors. For each signature of arguments (each tensor's shape,
  dtype and device, in a list, tuple or dict too, which tensors share a buffer, every other argument's value), the first
  two calls run the function under a capture: the first's data is noted, the second's kernels become the replay, and
  later calls replay those kernels on the new inputs' buffers: no graph, no scheduling, no lowering.

  What a replay reads: the given tensors' buffers; the tensors the function reads without being given them (weights),
  where they were at capture, each pending write into them run first; data the function makes of Python values, as the
  second call made it, filled again each replay (so data that changed between the first two calls raises; rand's is
  drawn anew each replay, as the call would have). Reading a tensor's values while captured raises (what the call did
  with them, a replay wouldn't redo), as tinygrad's. Each call's outputs (the tensors it returns, however nested) are
  new buffers, so a result keeps its values after later calls. What was lazy before a capturing call is realized first;
  writes the function leaves pending are part of its step; a replay realizes what reads the buffers it writes in place
  first, as assign() does. A TinyJit called by another's function, capturing or replaying, is captured with it."""
  def __init__(self, fn:Callable):
    self.fn, self.first, self.replays = fn, Bounded(), Bounded()  # first: what each signature's first call made of data
    self.returned: weakref.WeakSet = weakref.WeakSet()  # buffers this jit's own calls returned, before any replay
    functools.update_wrapper(self, fn)
  def __get__(self, obj, objtype=None):  # on a method: bound to its object, as a function is
    return self if obj is None else functools.partial(self.__call__, obj)
  def __call__(self, *args, **kwargs):
    # a view that isn't all of a buffer (X[k:k+2], an expand, a pad) is given as a copy: a replay binds the given
    # tensors' buffers, whole
    def whole(t:Tensor) -> Tensor:
      return t if t.uop.op is not Ops.VIEW or _whole_view_of(t.uop) is not None else t.clone()
    args, kwargs = mapped((args, kwargs), whole)
    given: list[Buffer] = []  # the tensors' buffers, each once
    key = (tuple(kwargs), *[signature(x, given) for x in (*args, *kwargs.values())])
    try: replay = self.replays.get(key)
    except TypeError as e:  # (a set, say)
      raise TypeError("TinyJit's arguments are part of its signature: each must be a tensor, a list, tuple or dict, or "
                      f"hashable ({e})") from None
    if replay is not None:
      # a weight it reads, given too: a sharing no capture saw, so the call runs as it is
      if not replay.holds.isdisjoint(given): return self.fn(*args, **kwargs)
      if not replay.returns_given: return replay(given)
      tensors: dict[UOp, Tensor] = {}  # an argument it returns as it is: that tensor, as the call returns it
      mapped((args, kwargs), lambda t: tensors.setdefault(t.uop, t))
      return mapped(replay(given), lambda t: tensors.get(t.uop, t))
    if capturing.now is None:  # what was computed or written lazily before the call is realized now: inside the
      # capture, every replay would compute it, or write it, again
      if lazy := [t for t in Tensor._alive() if t.uop.buffers and not t.uop.in_memory]: Tensor.realize(*lazy)
    outer, capturing.now = capturing.now, Capture(Tensor._counter)
    try:
      out = self.fn(*args, **kwargs)
      outs: list[Tensor] = []  # the tensors it returns
      mapped(out, outs.append)
      writes = [t for t in Tensor._alive() if t.uop.op is Ops.ASSIGN]  # the call's, left pending: part of the step
      if outs or writes: Tensor.realize(*outs, *writes)
    finally: call, capturing.now = capturing.now, outer
    self.returned.update(b for t in outs if t.uop.src[0].op is Ops.BUFFER and (b := t.uop.src[0].arg) in call.made)
    if outer is not None:  # a jit around this one's
      outer.launches += call.launches
      outer.data += call.data
      outer.computed |= call.computed
      outer.made |= call.made
      outer.filled |= call.filled
    if key not in self.first: self.first[key] = call.fingerprint()  # the first call: its data noted
    elif call.fingerprint() != self.first[key]:  # the second: its data must be the first's
      raise RuntimeError("a TinyJit function made a tensor of Python data that changed between its first two calls: a "
                         "replay would read what the second made. Make it outside the function and pass it in.")
    else: self.replays[key] = Replay.of(call, given, out, outs, self.returned)
    return out

@dataclass
class Replay:
  """Captured launches over slots: the call's input buffers, then its outputs' buffers, which each replay makes anew,
  then buffers it holds: the call's other buffers (its own, made once: nothing outside it reads them), and buffers as
  they were at capture (weights), of which rand's places are written anew, so that each replay draws what its call
  would have. What the function returned, with each tensor in it as an Output: the slot of its buffer, and its view.
  Replays of one capture take turns, as they share its buffers."""
  new_outputs: list[tuple[str, int, DType]]  # (device, size, dtype) of each output buffer a replay makes
  held: list[Buffer]
  places: list[tuple[int, int]]  # (slot, place in rand's sequence counted from where the call began)
  filled: list[tuple[int, bytes]]  # (slot, data) of each buffer it makes that the call filled with Python data
  hashes: list[int]  # of all the Python data the call made, whatever buffer holds it
  draws: int  # how far the call moved rand's sequence
  launches: list[tuple[Callable, Launch]]  # each kernel's function, and its launch over the replay's slots
  outputs: Any
  native: Callable[[list], None]|None  # the launches as one call, where the device has a graph of kernels
  written: list[int]  # the slots its kernels write: each noted written, as launch notes them
  # of those, what tensors outside the replay may hold: inputs it writes in place, and BUFFERs it holds (weights)
  inputs_written: list[int]
  held_written: frozenset[UOp]
  returns_given: bool  # whether an output is a given buffer
  holds: frozenset[Buffer]  # the buffers it reads as they were at capture (weights)
  turns: threading.Lock = field(default_factory=threading.Lock)
  @staticmethod
  def of(call:Capture, given:list[Buffer], out, outs:list[Tensor], returned:weakref.WeakSet) -> Replay:
    """The replay of a captured call, given these buffers, that returned out (its tensors: outs). The call's buffers
    are given (the inputs), made by its plans (made: the outputs it returned, which each replay makes anew, and its
    own, made once), or held (the rest: weights as they were, and returned buffers it didn't make)."""
    made, held = [], []
    for _, l, bufs in call.launches:
      for i, b in enumerate(bufs):
        if b in given or b in made or b in held: continue
        if i >= l.output_count and b in returned:
          raise RuntimeError("a TinyJit function read a tensor that an earlier call returned, without being given it: "
                             "a replay would read it as it was then. Pass it as an argument.")
        made_here = i < l.output_count and b in call.made  # an output one of this call's plans allocated
        (made if made_here else held).append(b)
    returns = list(dict.fromkeys(t.uop.src[0].arg for t in outs))
    own = [b for b in made if b not in returns]
    outputs = [b for b in made if b in returns]  # made anew by each replay
    held += [b for b in returns if b not in given + outputs + held]  # returned, not made by the call: held as is
    slots = {b: i for i, b in enumerate(given + outputs + own + held)}
    places = [(slots[p.buffer], p.start - call.start) for p in call.data if isinstance(p, Place) and p.buffer in slots]
    launches = [(fn, l._replace(slots=[slots[b] for b in bufs])) for fn, l, bufs in call.launches]
    return Replay(new_outputs=[(b.device, b.size, b.dtype) for b in outputs],
                  held=[Buffer(b.device, b.size, b.dtype) for b in own] + held, places=places,
                  filled=[(slots[b], call.filled[b]) for b in outputs + own if b in call.filled],
                  hashes=[d for d in call.data if not isinstance(d, Place)],
                  draws=Tensor._counter - call.start, launches=launches, native=device_graph(launches),
                  written=(written := sorted({s for _, l in launches for s in l.slots[:l.output_count]})),
                  inputs_written=[s for s in written if s < len(given)],
                  held_written=frozenset(UOp(Ops.BUFFER, b.dtype, (), b) for b in held if slots[b] in written),
                  outputs=mapped(out, lambda t: Output(slots[t.uop.src[0].arg], t.uop)),
                  returns_given=any(t.uop.src[0].arg in given for t in outs), holds=frozenset(held))
  @functools.cached_property
  def work(self) -> tuple[int, int]:  # its kernels' operations and bytes moved, for GlobalCounters
    return sum(l.prog.flops for _, l in self.launches), sum(l.prog.moved for _, l in self.launches)
  def __call__(self, given:list[Buffer]):
    outputs = [Buffer(*m) for m in self.new_outputs]
    bufs = given + outputs + self.held
    if self.draws:
      start, Tensor._counter = Tensor._counter, Tensor._counter + self.draws
      for slot, place in self.places: bufs[slot] = Tensor._place(start + place, bufs[slot].device).buffer()
    for slot, data in self.filled: bufs[slot].copyin(memoryview(data))
    if capturing.now is not None:  # a jit around this one's: what its call made, noted as the call noted it
      capturing.now.made.update(outputs)  # (made anew by each of its replays)
      capturing.now.data += self.hashes
      capturing.now.filled |= {bufs[slot]: data for slot, data in self.filled}
    # a write pending into a buffer it holds (a weight) runs first, as it would before the call's kernels; what reads a
    # buffer the replay writes in place is realized first, as the call's assigns realized it
    if pending := [b.pending for b in self.held if b.pending is not None]: Tensor.realize(*pending)
    written = self.held_written | {UOp(Ops.BUFFER, bufs[s].dtype, (), bufs[s]) for s in self.inputs_written}
    if written: Tensor._realize_readers(written)
    with self.turns:  # kernel by kernel where each is seen: timed and listed (DEBUG=2), or captured by an outer jit
      if self.native is None or getenv("DEBUG") >= 2 or capturing.now is not None: launch(self.launches, bufs)
      else:
        self.native([b.buf for b in bufs])
        for s in self.written: bufs[s].note_write()
        GlobalCounters.ran(len(self.launches), *self.work, 0.0)
    return mapped(self.outputs, lambda o: Tensor._of(o.view.rebind(bufs[o.slot]), bufs[o.slot].device), Output)

def device_graph(launches:list[tuple[Callable, Launch]]) -> Callable[[list], None]|None:
  """A replay's kernels as one call to its device, bound to the buffers it is given by slot: a table the CPU's pool
  runs in C, a CUDA graph, one Metal command buffer. None where the device has none (the emulator) or the kernels
  run on several."""
  devices = {l.device for _, l in launches}
  make = getattr(Device[devices.pop()].runtime, "graph", None) if len(devices) == 1 else None
  return None if make is None else make([GraphKernel(fn, l.slots, l.prog.global_size, l.prog.local_size)
                                          for fn, l in launches])

class GraphKernel(NamedTuple):  # a kernel of a replay's graph
  program: Callable
  slots: list[int]  # its buffers', among the replay's
  global_size: tuple
  local_size: tuple

class Output(NamedTuple):  # a tensor a replay returns: the slot of its buffer, and its view of that buffer
  slot: int
  view: UOp

# ---------------------------------------------------------------------------------------------------------------------
# Systems: what a reader of the compiler can skip. The CPU's worker pool (in C), the folders compiled kernels are kept
# in, and the disk cache's files; composites' templates; sine's exact argument reduction; workarounds for one
# interpreter's speed.

@functools.cache
def compile_pool(pid:int) -> concurrent.futures.ThreadPoolExecutor:  # one a process: a forked child has no threads
  return concurrent.futures.ThreadPoolExecutor(threads())

class Workers:
  """Threads that each take chunks of a kernel while the calling thread takes them too, in C: each chunk is claimed by
  an atomic compare-and-swap, so a kernel's chunks start within a microsecond, and one that a worker doesn't wake for
  in time is run by the caller. Python threads would wait on a lock and then for the GIL: tens of microseconds a
  kernel. A worker spins a while after each kernel, as the next one often comes soon, then sleeps. One kernel at a
  time. The pool is compiled once (and kept in the disk cache) on the first kernel that uses it; a forked child, which
  has none of its parent's threads, starts its own. The same C runs a TinyJit replay's kernels in one call (graph)."""
  most = 64  # buffers a pooled kernel may take: the pool calls a kernel through a function of its argument count
  def __init__(self, runtime:CPURuntime, n:int): self.runtime, self.n, self.pid = runtime, n, None
  def run(self, fn:Callable, bufs:tuple, chunks:int):
    if len(bufs) > Workers.most:  # (a kernel of that many buffers is rare: its chunks run one after another)
      for chunk in range(chunks): fn(*bufs, chunk)
      return
    if self.pid != os.getpid(): self.start()
    self.call(fn, (ctypes.c_void_p * len(bufs))(*map(ctypes.addressof, bufs)), len(bufs), chunks)
  def graph(self, kernels:list[GraphKernel]) -> Callable[[list], None]|None:
    """Kernels as a table that the pool's C runs in one call: a replay binds its buffers once, by slot, and Python
    doesn't run between kernels."""
    if any(len(k.slots) > Workers.most for k in kernels): return None
    slots = [(ctypes.c_int * len(k.slots))(*k.slots) for k in kernels]
    table = (Step * len(kernels))(*[Step(ctypes.cast(k.program.fn, ctypes.c_void_p), len(s), k.global_size[0], s)
                                    for k, s in zip(kernels, slots)])
    def run(bufs:list):
      if self.pid != os.getpid(): self.start()
      self.replay(table, len(kernels), (ctypes.c_void_p * len(bufs))(*map(ctypes.addressof, bufs)))
    run.holds = kernels, slots  # (what the table points into stays loaded while it can run)
    return run
  def start(self):
    # callN calls a kernel of N buffers with its chunk, plainN one of a single chunk, which takes none: call2 is
    # ((void (*)(void*, void*, int))f)(b[0], b[1], c), plain2 is ((void (*)(void*, void*))f)(b[0], b[1])
    ns = range(Workers.most + 1)
    calls = [f"static void call{n}(void* f, void** b, int c) {{ ((void (*)({'void*, ' * n}int))f)"
             f"({''.join(f'b[{i}], ' for i in range(n))}c); }}" for n in ns]
    plains = [f"static void plain{n}(void* f, void** b) {{ ((void (*)({', '.join(['void*'] * n) or 'void'}))f)"
              f"({', '.join(f'b[{i}]' for i in range(n))}); }}" for n in ns]
    tables = [f"static void (*const {name}s[])({args}) = {{{', '.join(f'{name}{n}' for n in ns)}}};"
              for name, args in (("call", "void*, void**, int"), ("plain", "void*, void**"))]
    lib = self.runtime.library(POOL.replace("CALLS", "\n".join([f"#define MOST {Workers.most}", *calls, *plains,
                                                                  *tables])), "-pthread")
    if ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(_ctypes.dlsym(lib, "start"))(self.n) != 0:
      raise RuntimeError(f"can't start {self.n} CPU worker threads (THREADS={self.n + 1})")
    self.call = ctypes.CFUNCTYPE(None, CPURuntime.kernel, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)(
      _ctypes.dlsym(lib, "run"))
    self.replay = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)(_ctypes.dlsym(lib, "replay"))
    self.pid = os.getpid()

class Step(ctypes.Structure):  # a kernel of a replay's table: struct step in the pool's C
  _fields_ = [("fn", ctypes.c_void_p), ("nbufs", ctypes.c_int), ("chunks", ctypes.c_int),
              ("slots", ctypes.POINTER(ctypes.c_int))]

# The pool: a job is a kernel, its buffers and how many chunks it has. `state` holds the job's number (high 32 bits)
# and its next unclaimed chunk (low 32): a claim is a compare-and-swap on it, so a claim made while reading an older
# job's fields fails, and a job's fields are only rewritten once every chunk of it is done.
POOL = r"""
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
CALLS
static struct { void* _Atomic fn; void** _Atomic bufs; atomic_int nbufs, chunks; } job;
static _Atomic uint64_t state;
static atomic_int finished, sleepers;
static pthread_mutex_t lock, one;  /* lock: for sleeping; one: one kernel at a time */
static pthread_cond_t wake;
static const long spin_ns = 500000;  /* how long an idle worker watches for the next kernel before it sleeps */

static int claim(uint64_t number) {  /* run one chunk of that job: 0 once none is left, or a newer job is out */
  for (uint64_t s = atomic_load(&state); s >> 32 == number;) {
    void* fn = job.fn; void** bufs = job.bufs; int nbufs = job.nbufs, chunks = job.chunks;
    if ((uint32_t)s >= (uint32_t)chunks) return 0;
    if (atomic_compare_exchange_weak(&state, &s, s + 1)) {
      calls[nbufs](fn, bufs, (int)(uint32_t)s);
      atomic_fetch_add(&finished, 1);
      return 1;
    }
  }
  return 0;
}
static long now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec;
}
static void idle(uint64_t seen) {  /* until a job after `seen` is out */
  for (long start = now(); atomic_load(&state) >> 32 == seen && now() - start < spin_ns;) sched_yield();
  pthread_mutex_lock(&lock);
  atomic_fetch_add(&sleepers, 1);  /* before the check: run either sees a sleeper or this sees its job */
  while (atomic_load(&state) >> 32 == seen) pthread_cond_wait(&wake, &lock);
  atomic_fetch_sub(&sleepers, 1);
  pthread_mutex_unlock(&lock);
}
static void* worker(void* unused) {
  for (uint64_t seen = atomic_load(&state) >> 32;; seen = atomic_load(&state) >> 32) {
    while (claim(seen)) {}
    idle(seen);
  }
  return unused;
}
int start(int n) {  /* (in a forked child, whatever the parent's threads held is let go here) */
  pthread_mutex_init(&lock, 0); pthread_mutex_init(&one, 0); pthread_cond_init(&wake, 0);
  atomic_store(&sleepers, 0);
  for (int i = 0; i < n; i++) {
    pthread_t t;
    if (pthread_create(&t, 0, worker, 0) != 0) return -1;
    pthread_detach(t);
  }
  return 0;
}
void run(void* fn, void** bufs, int nbufs, int chunks) {
  pthread_mutex_lock(&one);
  job.fn = fn; job.bufs = bufs; job.nbufs = nbufs; job.chunks = chunks;
  atomic_store(&finished, 0);
  uint64_t number = (atomic_load(&state) >> 32) + 1;
  atomic_store(&state, number << 32);
  if (atomic_load(&sleepers)) { pthread_mutex_lock(&lock); pthread_cond_broadcast(&wake); pthread_mutex_unlock(&lock); }
  while (claim(number)) {}
  while (atomic_load(&finished) < chunks) sched_yield();  /* for the chunks workers took */
  pthread_mutex_unlock(&one);
}
struct step { void* fn; int nbufs, chunks; const int* slots; };
void replay(const struct step* steps, int n, void** bufs) {  /* each kernel on its buffers (by slot), in order */
  void* b[MOST];
  for (const struct step* s = steps; s < steps + n; s++) {
    for (int i = 0; i < s->nbufs; i++) b[i] = bufs[s->slots[i]];
    if (s->chunks == 1) plains[s->nbufs](s->fn, b); else run(s->fn, b, s->nbufs, s->chunks);
  }
}
"""

@functools.cache
def scratch() -> str:
  """This process's own folder, removed at exit: libraries load from here, so a load never writes into the cache."""
  path = tempfile.mkdtemp(prefix="tiny-")
  atexit.register(shutil.rmtree, path, True)
  return path

@functools.cache
def usable(path:str) -> str:
  """The cache folder at path; where it can't be made or written (a file in its way, no writable home), this
  process's scratch() folder instead, with one warning."""
  try: os.makedirs(path, exist_ok=True)
  except OSError as e: why = e.strerror
  else:
    if os.access(path, os.W_OK | os.X_OK): return path
    why = "not writable"
  warnings.warn(f"tiny can't keep compiled kernels in {path} ({why}): it keeps them in {scratch()} until it exits")
  return scratch()

def cache_dir() -> str:
  xdg = os.getenv("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
  return usable(os.getenv("TINY_CACHE") or os.path.join(xdg, "tiny"))

# The disk cache: an entry starts with the hash of its key and contents, so one that is truncated, corrupt or stored
# under another key is made again, never used, and so is one that can't be read.
def cache_read(key:bytes, suffix:str, again:str) -> bytes|None:
  path = os.path.join(cache_dir(), hashlib.sha256(key).hexdigest() + suffix)
  if getenv("NOCACHE"): return None
  try:
    with open(path, "rb") as f: entry = f.read()
  except OSError: return None  # no file, a folder in its place, no permission: a miss
  if entry[:32] == hashlib.sha256(key + entry[32:]).digest(): return entry[32:]
  if getenv("DEBUG") >= 1: print(f"the cached kernel {path} is damaged: {again}")
  return None

def cache_write(key:bytes, suffix:str, data:bytes) -> bytes:
  """Keeps data in the cache folder. A folder that stopped being usable while the process ran (removed, unwritable,
  full) is checked again, as on first use: made anew, or replaced with a warning. An entry that still can't be written
  is not kept."""
  try: cache_entry(key, suffix, data)
  except OSError:
    usable.cache_clear()
    try: cache_entry(key, suffix, data)
    except OSError as e: warnings.warn(f"tiny can't keep a compiled kernel in {cache_dir()} ({e.strerror})")
  return data

def cache_entry(key:bytes, suffix:str, data:bytes):
  fd, tmp = tempfile.mkstemp(dir=cache_dir())
  try:
    with os.fdopen(fd, "wb") as f: f.write(hashlib.sha256(key + data).digest() + data)
    os.replace(tmp, os.path.join(cache_dir(), hashlib.sha256(key).hexdigest() + suffix))  # atomic: all of it or none
  except OSError:
    os.unlink(tmp)
    raise

@functools.cache
def tiny_version() -> str:  # this tiny.py, by its hash: another version may lower a kernel otherwise
  with open(__file__, "rb") as f: return hashlib.sha256(f.read()).hexdigest()

def reuse_bytes() -> int:
  """Bytes of freed buffers a device keeps: LRU_MB megabytes, else an eighth of RAM up to 1 GiB; with LRU=0, none."""
  ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  if not getenv("LRU", 1): return 0
  return getenv("LRU_MB", min(ram // 8, 2**30) // 2**20) * 2**20

# Composites' templates: a composite's graph built once over placeholders, as a list of steps, and made again over
# each call's inputs.

class Placeholder(NamedTuple):  # a BUFFER's arg in a composite's template: which of its inputs it stands for
  composite: str
  index: int
# (BUFFER args in a gradient: a value a write replaced, gone, see _value_seen; of a constant, or not known)
REPLACED, UNKNOWN = Placeholder("what a write replaced", 0), Placeholder("what a write replaced", 1)

def replayed(fn:Callable, templates:Bounded, args:tuple, kwargs:dict) -> Tensor:
  """A composite's call (see composite): its template, made once for the structure of its inputs, made again over
  them. No template is kept where a placeholder's view can't be made again (a detached view) or an argument can't be
  part of a key (a list): fn then builds the graph each call."""
  key = tuple([(Tensor, a.uop.shape, a.uop.dtype, a.device) if isinstance(a, Tensor) else (type(a), arg_key(a))
               for a in (*args, *kwargs.values())]) + tuple(kwargs) + (dtypes.default_float, dtypes.default_int)
  # (the defaults decide what a Python number in the method becomes)
  try: template = templates[key]
  except KeyError: template = templates[key] = _template(fn, args, kwargs)
  except TypeError: return fn(*args, **kwargs)  # (an unhashable argument)
  if template is None: return fn(*args, **kwargs)
  return Tensor._of(template.made([a.uop for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]), template.device)

class Build(NamedTuple):  # a template's step: a node to build, its sources by step number
  op: Ops
  dtype: DType|None
  src: tuple[int, ...]
  arg: Any

class MovedInput(NamedTuple):  # a template's step: an input, moved as its placeholder's view was
  input: int
  moves: tuple[Move, ...]

class Template(NamedTuple):
  """A composite's graph as steps, each node's sources before it: a node to build (its sources by step number), a
  node without sources to take as it is, or an input moved."""
  steps: list[Build|MovedInput|UOp]
  device: str
  def made(self, inputs:list[UOp]) -> UOp:  # the graph over these inputs
    done: list[UOp] = []
    for step in self.steps:
      if type(step) is Build: done.append(UOp(step.op, step.dtype, tuple([done[i] for i in step.src]), step.arg))
      elif type(step) is MovedInput:
        done.append(inputs[step.input].moved(*step.moves) if step.moves else inputs[step.input])
      else: done.append(step)
    return done[-1]

def _template(fn:Callable, args:tuple, kwargs:dict) -> Template|None:
  leaves: list[UOp] = []
  def stand_in(a):  # a tensor's placeholder: a whole view of a BUFFER that no buffer is behind
    if not isinstance(a, Tensor): return a
    placeholder = a._stand_in(Placeholder(fn.__qualname__, len(leaves)))
    leaves.append(placeholder.uop.src[0])
    return placeholder
  args = [stand_in(a) for a in args]  # (before the keywords': the leaves go in the inputs' order)
  out = fn(*args, **{k: stand_in(v) for k, v in kwargs.items()})
  steps, step_of = [], {}
  for u in out.uop.toposort:
    if u.op is Ops.VIEW and u.src[0] in leaves:
      start, moves = u.arg.history  # the moves that made it
      if start != ShapeTracker.contiguous(start.shape): return None  # not from the placeholder's own view (detached)
      step = MovedInput(leaves.index(u.src[0]), moves)
    elif u in leaves: continue
    else: step = Build(u.op, u.dtype, tuple(step_of[s] for s in u.src), u.arg) if u.src else u
    step_of[u] = len(steps)
    steps.append(step)
  return Template(steps, out.device)

# Sine's argument reduction past pi/4 (see _sin): x = q*pi/2 + r, with r as hi + lo, exactly, in integer digits.

# the bits of 2/pi after the point, 32 to a word, after a word of zeros (a window that starts before the point reads 0s)
two_over_pi = [0, 0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599, 0x3C439041, 0xFE5163AB]

def _payne_hanek(mag:UOp) -> tuple[UOp, UOp, UOp]:
  """Payne-Hanek: |x| = m * 2**e (m an int of 24 bits) times 2/pi, mod 4, is q (the quadrant) + f, exactly enough
  for every float; rounded to the nearest quadrant, f is in [-1/2, 1/2] and r = f * pi/2, as hi + lo."""
  d = _times_two_over_pi(mag)
  # d's 8 digits of 12 bits: d[7]'s top 2 are q, the 70 below are f, as ints of 22, 24 and 24 bits
  a, b, c = ((d[7] & 0x3FF) << 12) | d[6], (d[5] << 12) | d[4], (d[3] << 12) | d[2]
  up = a.const_like(2**21 - 1) < a  # a's top bit, f >= 1/2: the next quadrant, at f - 1, kept as 2**70 - f
  q = ((d[7] >> 10) + up.cast(dtypes.int)) & 3
  # a digit of 2**70 - f borrows 1 from the one above it unless every digit below it is 0
  borrow_c = c.alu(Ops.CMPNE, c.const_like(0)).cast(dtypes.int)
  borrow_b = (b + borrow_c).alu(Ops.CMPNE, b.const_like(0)).cast(dtypes.int)  # (b or c is not 0)
  def negated(x:UOp, borrow:UOp|int, bits:int) -> UOp:  # x's digit of 2**70 - f, where f rounds up
    return up.where((x.const_like(1 << bits) - x - borrow) & ((1 << bits) - 1), x)
  hi, lo = _times_half_pi(negated(a, borrow_b, 22), negated(b, borrow_c, 24), negated(c, 0, 24))
  return q, up.where(-hi, hi), up.where(-lo, lo)

def _times_two_over_pi(mag:UOp) -> list[UOp]:
  """m * 2**e * 2/pi mod 4 needs only the 96 bits of 2/pi from its bit e-1 after the point on (earlier ones make
  multiples of 4, later ones add less than 2**-70): the window W, picked from the table by the exponent. m * W mod
  2**96, whose top 2 bits are q and the rest f, as 8 digits of 12 bits, least significant first: a product of two
  digits is exact in int32."""
  # bit e-1 of 2/pi (e = field - 150) is the table's bit field - 152 + 32 (it starts with a word of zeros): field - 120
  m, start = (mag & 0x7FFFFF) | 0x800000, (mag >> 23) - 120
  word, shift = start >> 5, start & 31
  def pick(j:int) -> UOp:  # the table's word + j: a select for each word 0..3, else 4 (the largest exponents')
    out = mag.const_like(two_over_pi[4 + j])
    for i in range(3, -1, -1):
      out = word.alu(Ops.CMPEQ, word.const_like(i)).where(mag.const_like(two_over_pi[i + j]), out)
    return out
  t = [pick(j) for j in range(4)]
  # W's words, least significant first: a word shifted left, the next one's top bits shifted in (t >> 32 - shift, as a
  # logical shift, which is 0 at shift 0)
  ws = [(t[j] << shift) | (((t[j + 1] >> 1) & 0x7FFFFFFF) >> (shift.const_like(31) - shift)) for j in (2, 1, 0)]
  def digit(bit:int) -> UOp:  # bits bit..bit+11 of W; one that straddles two words takes its top bits from the next
    i, o = divmod(bit, 32)
    low = (ws[i] >> o) & min(0xFFF, (1 << (32 - o)) - 1)
    return low if o <= 20 else low | ((ws[i + 1] & ((1 << (o - 20)) - 1)) << (32 - o))  # (o <= 20: inside word i)
  w, (m0, m1) = [digit(12 * c) for c in range(8)], (m & 0xFFF, m >> 12)
  d, carry = [], m.const_like(0)
  for c in range(8):  # column c of m * W (weight 2**(12c)), with the carry from the one below
    if c == 0: v = m0 * w[c] + carry
    else: v = m0 * w[c] + m1 * w[c - 1] + carry
    d.append(v & 0xFFF)
    carry = v >> 12
  return d

def _times_half_pi(a:UOp, b:UOp, c:UOp) -> tuple[UOp, UOp]:
  """f = a*2**-22 + b*2**-46 + c*2**-70 (ints of 22, 24, 24 bits) times pi/2, as two floats: f first as two floats
  (from b where a is 0: f < 2**-22 keeps its precision), then each product of its first 12 bits, or the rest, with
  pi/2's first 12 bits is exact (so a fused multiply-add can't change it), and the other products are corrections."""
  zero = a.alu(Ops.CMPEQ, a.const_like(0))
  def scaled(small:UOp, big:UOp, e:int) -> UOp:  # big * 2**e, or small * 2**(e-24) where a is 0
    return zero.where(small, big).cast(dtypes.float) * zero.where(UOp.const(dtypes.float, 2.0**(e - 24)),
                                                                   UOp.const(dtypes.float, 2.0**e))
  first, second = scaled(b, a, -22), scaled(c, b, -46)
  f = first + second
  f_lo = second - (f - first)  # f + f_lo is first + second exactly (Fast2Sum: |first| >= |second|)
  f_hi = (f.bitcast(dtypes.int) & -4096).bitcast(dtypes.float)  # f's first 12 bits; f - f_hi is exact
  # pi/2 = 1.5703125 (12 bits) + 0.00048382679...
  head, tail = f_hi * 1.5703125, (f - f_hi) * 1.5703125 + (f * 0.0004838267923332751 + f_lo * 1.5707963705062866)
  hi = head + tail
  return hi, tail - (hi - head)

# Python 3.11 (3.12 has neither cost): an Enum class looks up every attribute through EnumType's __getattr__ hook, 0.1
# us each, and passes ask for ops all the time, so the members go on a plain class of the same name; and
# functools.cached_property takes a lock on each first read, so UOp's, View's and ShapeTracker's computed fields use one
# that doesn't (two threads reading a field at once may both compute it: harmless for a pure function of an immutable
# object). Without them, a model step's realize() (an MLP's and a decoder's, batch 1) is 13-17% slower.
def plain(enum:type) -> type: return type(enum.__name__, (), dict(enum.__members__))
Ops, AxisType = plain(Ops), plain(AxisType)
class cached:
  def __init__(self, fn:Callable): self.fn, self.name = fn, fn.__name__
  def __get__(self, obj, cls=None):
    if obj is None: return self
    obj.__dict__[self.name] = value = self.fn(obj)
    return value
for _cls in (UOp, View, ShapeTracker):
  for _name, _prop in list(vars(_cls).items()):
    if isinstance(_prop, functools.cached_property): setattr(_cls, _name, cached(_prop.func))
del _cls, _name, _prop
