#!/usr/bin/env python3
"""bench.py: how fast is tiny on this device, next to hand-written kernels and the peers that happen to be installed?

  python bench.py                                       # the default device, in a few minutes
  python bench.py --quick                               # a few rows: CI's smoke run
  python bench.py --device CUDA --sizes 1M,10M --big --json out.json

Every row is measured afresh on each run, on one device: tiny's kernel time (run_schedule with wait), the hand-written
baseline's kernel time (RawKernel) and each peer's wall time, interleaved call by call after a warm-up so that drift
(clocks, other load) hits them all alike; the table shows medians. Each result is checked before anything is timed.
GB/s counts each input read once and each output written once; % is of the device's peak bandwidth, measured here by a
large copy through a hand-written kernel."""
from __future__ import annotations
import os, sys, math, json, time, random, shutil, argparse, platform, datetime, tempfile, functools, contextlib
import subprocess
import importlib.metadata
from dataclasses import dataclass, field
from typing import Callable
from tiny import Tensor, Device, RawKernel, TinyJit, Capture, capturing, schedule, run_schedule, render, cdiv

# Peers' thread pools spin on the cores for milliseconds after each call (libgomp, which torch uses: 300,000 spins by
# default; OpenBLAS, which numpy uses: about 2**28 cycles), and interleaved, the next contender runs on what they
# leave: on 2 cores, tiny's matmul beside numpy and its row softmax beside torch run 2x slower. Set before the peers
# load: libgomp spins a twentieth as long (torch's own times stay as they are), OpenBLAS sleeps at once (numpy's too).
# tiny's own pool never spins. A value set in the environment wins.
os.environ.setdefault("GOMP_SPINCOUNT", "15000")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

# ---------------------------------------------------------------------------------------------------------------------
# The ops as tiny writes them (torch and tinygrad spell them the same), and pure-Python references: given the inputs'
# floats and shape, a function from a flat index of the output to the value expected there.

OPS = {"add": lambda a, b: a + b, "vma": lambda a, b, c: a * b + c, "sum": lambda a: a.sum(),
       "softmax": lambda a: a.softmax(-1), "matmul": lambda a, b: a @ b}
ARITY = {"copy": 1, "add": 2, "vma": 3, "sum": 1, "softmax": 1, "matmul": 2}

def softmax_ref(x, shape):
  cols = shape[-1]
  @functools.cache
  def stats(r):  # a row's max and sum of exp(x - max), once however many samples fall in the row
    m = max(x[0][r*cols:(r+1)*cols])
    return m, math.fsum(math.exp(v - m) for v in x[0][r*cols:(r+1)*cols])
  return lambda i: math.exp(x[0][i] - stats(i // cols)[0]) / stats(i // cols)[1]

def matmul_ref(x, shape):
  n = shape[1]
  return lambda i: math.fsum(x[0][i // n * n + k] * x[1][k * n + i % n] for k in range(n))

REFS = {"copy": lambda x, shape: lambda i: x[0][i], "add": lambda x, shape: lambda i: x[0][i] + x[1][i],
        "vma": lambda x, shape: lambda i: x[0][i] * x[1][i] + x[2][i],
        "sum": lambda x, shape: lambda i: math.fsum(x[0]), "softmax": softmax_ref, "matmul": matmul_ref}

# ---------------------------------------------------------------------------------------------------------------------
# Hand-written baselines, each kernel its own source with its sizes baked in: a float4 VMA, a tree reduction, a
# 3-pass softmax and a tiled matmul. One plan per op for every device; a dialect is a table of strings and three
# kernel builders. CPU: C, split across cores the way tiny's CPU kernels are. The CUDA sources compile with NVRTC; the
# Metal ones follow the CUDA ones line for line, and no test compiles them (that takes a Mac).

EW = {"copy": "{a}", "add": "{a} + {b}", "vma": "{a} * {b} + {c}"}  # elementwise ops over lanes a, b, c
CORES = os.cpu_count() or 1  # tiny's CPU kernels split their outer loop into one contiguous chunk per core

def c_kernel(name:str, params:list[str], items:int, work:int, body:str) -> tuple:
  """A C function over units of work [lo, hi) of `items`. tiny's CPU runtime calls it once per thread from a pool, the
  thread's index last: one contiguous chunk per core, as tiny's kernels, once each core has 2^19 elements of `work`
  (waking a thread costs tens of µs)."""
  threads = max(1, min(CORES, items, work >> 19))
  chunk, core = cdiv(items, threads), ("core", ", const int core") if threads > 1 else ("0", "")
  # tiny compiles its own kernels with -fno-tree-loop-vectorize (it lays out vectors itself); these plain C loops are
  # written for gcc's vectorizer, so they turn it back on
  src = f"""#include <math.h>
#pragma GCC optimize("tree-loop-vectorize")
void {name}({', '.join('float* restrict ' + p for p in params)}{core[1]}) {{
  int lo = {core[0]}*{chunk}, hi = lo + {chunk} < {items} ? lo + {chunk} : {items};
{body}
}}"""
  return name, src, (threads, 1, 1), (1, 1, 1)

def c_ew(d:dict, name:str, expr:str, n:int, ins:str, extra:tuple=(), cols:int=1) -> tuple:
  """A plain loop: gcc -O2 -march=native vectorizes it. `{r}` in expr is the element's row."""
  body = f"  for (int i = lo; i < hi; i++) out[i] = {expr.format(**d, **{x: f'{x}[i]' for x in ins}, r=f'i/{cols}')};"
  return c_kernel(name, ["out", *ins, *extra], n, n, body)

def c_reduce(d:dict, name:str, op:str, rows:int, cols:int, parts:int, pre:str="v", extra:tuple=()) -> tuple:
  """Item w reduces part w % parts of row w / parts to out[w], in 16 lanes (independent adds, so they vectorize; C
  won't reorder float adds) of doubles (a float lane summing millions of terms drifts), then a tree over the lanes."""
  f, span = "{0} + {1}" if op == "sum" else d["max"], cdiv(cols, parts)
  body = f"""\
  for (int w = lo; w < hi; w++) {{
    int r = w / {parts}, j = w % {parts} * {span}, end = j + {span} < {cols} ? j + {span} : {cols};
    double acc[16];
    for (int k = 0; k < 16; k++) acc[k] = {IDENTITY[op]};
    for (; j + 16 <= end; j += 16)
      for (int k = 0; k < 16; k++) {{ float v = x[r*{cols} + j + k]; acc[k] = {f.format('acc[k]', pre)}; }}
    for (; j < end; j++) {{ float v = x[r*{cols} + j]; acc[0] = {f.format('acc[0]', pre)}; }}
    for (int s = 8; s > 0; s /= 2) for (int k = 0; k < s; k++) acc[k] = {f.format('acc[k]', 'acc[k + s]')};
    out[w] = acc[0];
  }}"""
  return c_kernel(name, ["out", "x", *extra], rows * parts, rows * cols, body)

def c_matmul(d:dict, n:int) -> tuple:
  body = f"""\
  for (int i = lo; i < hi; i++) {{  /* i-k-j order: the inner loop streams rows of b and out, so it vectorizes */
    for (int j = 0; j < {n}; j++) out[i*{n} + j] = 0.0f;
    for (int k = 0; k < {n}; k++)
      for (int j = 0; j < {n}; j++) out[i*{n} + j] += a[i*{n} + k] * b[k*{n} + j];
  }}"""
  return c_kernel("bench_matmul", ["out", "a", "b"], n, n ** 3, body)

T = 256  # threads per block of every GPU reduction and elementwise kernel: 8 warps

def gpu_kernel(d:dict, name:str, params:list[str], body:str) -> str:
  params = ", ".join(f"{d['space']}float* {p}" for p in params)
  return f"{d['head']}{d['kernel']} {name}({params}{d['ids']}) {{\n{body}\n}}"

def gpu_ew(d:dict, name:str, expr:str, n:int, ins:str, extra:tuple=(), cols:int=1) -> tuple:
  """One float4 per thread, so each thread issues one 16-byte load per input and one 16-byte store; a scalar tail."""
  def lane(k, c): return expr.format(**d, **{x: f"{x}4.{c}" for x in ins}, r=f"(i+{k})/{cols}")
  loads = " ".join(f"float4 {x}4 = *(({d['space']}float4*)({x}+i));" for x in ins)
  body = f"""\
  int i = ({d['gid']}.x*{T} + {d['lid']}.x)*4;
  if (i + 3 < {n}) {{ {loads}
    *(({d['space']}float4*)(out+i)) = {d['vec']}({', '.join(lane(k, c) for k, c in enumerate('xyzw'))}); }}
  else for (; i < {n}; i++) out[i] = {expr.format(**d, **{x: f'{x}[i]' for x in ins}, r=f'i/{cols}')};"""
  return name, gpu_kernel(d, name, ["out", *ins, *extra], body), (cdiv(n, 4*T), 1, 1), (T, 1, 1)

def gpu_reduce(d:dict, name:str, op:str, rows:int, cols:int, parts:int, pre:str="v", extra:tuple=()) -> tuple:
  """Block (b, r) reduces its strided share of row r (neighbouring threads read neighbouring floats: coalesced) to
  out[r*parts + b]. A warp combines through shuffles (registers, no shared memory), then the warps through shared
  memory."""
  f, ident = "{0} + {1}" if op == "sum" else d["max"], IDENTITY[op]
  warp = f"for (int o = 16; o > 0; o >>= 1) acc = {f.format('acc', d['shfl'].format('acc', 'o'))};"
  body = f"""\
  {d['shared']} float part[{T // 32}];
  int t = {d['lid']}.x, r = {d['gid']}.y;
  float acc = {ident};
  for (int j = {d['gid']}.x*{T} + t; j < {cols}; j += {parts * T}) {{
    float v = x[r*{cols} + j];
    acc = {f.format('acc', pre)};
  }}
  {warp}
  if (t % 32 == 0) part[t / 32] = acc;
  {d['sync']}
  if (t < 32) {{
    acc = t < {T // 32} ? part[t] : {ident};
    {warp}
    if (t == 0) out[r*{parts} + {d['gid']}.x] = acc;
  }}"""
  return name, gpu_kernel(d, name, ["out", "x", *extra], body), (parts, rows, 1), (T, 1, 1)

def gpu_matmul(d:dict, n:int) -> tuple:
  """16x16 tiles through shared memory: each element of a and b comes from global memory n/16 times, not n times."""
  body = f"""\
  {d['shared']} float ta[16][16], tb[16][16];
  int tx = {d['lid']}.x, ty = {d['lid']}.y, row = {d['gid']}.y*16 + ty, col = {d['gid']}.x*16 + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < {n}; k0 += 16) {{
    ta[ty][tx] = a[row*{n} + k0 + tx]; tb[ty][tx] = b[(k0 + ty)*{n} + col];
    {d['sync']}
    for (int k = 0; k < 16; k++) acc += ta[ty][k] * tb[k][tx];
    {d['sync']}
  }}
  out[row*{n} + col] = acc;"""
  return "bench_matmul", gpu_kernel(d, "bench_matmul", ["out", "a", "b"], body), (n // 16, n // 16, 1), (16, 16, 1)

IDENTITY = {"sum": "0.0f", "max": "-3.402823466e38f"}
DIALECTS = {  # width: how many parts a reduction may split a row into to keep the device busy (cores, or blocks)
  "CPU": dict(kernels=(c_ew, c_reduce, c_matmul), width=CORES, exp="expf", max="({0} > {1} ? {0} : {1})"),
  "CUDA": dict(kernels=(gpu_ew, gpu_reduce, gpu_matmul), width=1024, head="", kernel='extern "C" __global__ void',
               space="", ids="", gid="blockIdx", lid="threadIdx", vec="make_float4", shared="__shared__",
               sync="__syncthreads();", exp="expf", max="fmaxf({0}, {1})",
               shfl="__shfl_down_sync(0xffffffffu, {}, {})"),
  "METAL": dict(kernels=(gpu_ew, gpu_reduce, gpu_matmul), width=1024, kernel="kernel void", space="device ",
                head="#include <metal_stdlib>\nusing namespace metal;\n", gid="gid", lid="lid", vec="float4",
                ids=", uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]",
                shared="threadgroup", sync="threadgroup_barrier(mem_flags::mem_threadgroup);", exp="exp",
                max="max({0}, {1})", shfl="simd_shuffle_down({}, {})"),
}

def plan(op:str, shape:tuple, ins:list[Tensor], out:Tensor, dev:str) -> list:
  """The baseline's kernels for one op, each with the tensors it takes."""
  d, n, cols = DIALECTS[dev], math.prod(shape), shape[-1]
  ew, reduce, matmul = d["kernels"]
  rows = n // cols
  def step(spec, *ts): return RawKernel(*spec, device=dev), list(ts)
  if op in EW: return [step(ew(d, f"bench_{op}", EW[op], n, "abc"[:len(ins)]), out, *ins)]
  if op == "matmul": return [step(matmul(d, cols), out, *ins)]
  parts = min(cdiv(cols, 4096), max(1, d["width"] // rows))  # enough to keep the device busy, 4096 floats or more each
  def two_level(kind:str, x:Tensor, dst:Tensor, pre:str="v", extra:tuple=()) -> list:
    """Reduce each row in parts, then the parts: any size fits."""
    part = Tensor.empty(rows * parts, device=dev) if parts > 1 else dst
    first = step(reduce(d, f"bench_{kind}", kind, rows, cols, parts, pre, tuple(name for name, _ in extra)),
                 part, x, *[t for _, t in extra])
    if parts == 1: return [first]
    return [first, step(reduce(d, f"bench_{kind}_final", kind, rows, parts, 1), dst, part)]
  if op == "sum": return two_level("sum", ins[0], out)
  m, s = Tensor.empty(rows, device=dev), Tensor.empty(rows, device=dev)  # softmax: row max, sum of exp, normalize
  return two_level("max", ins[0], m) + two_level("sum", ins[0], s, f"{d['exp']}(v - m[r])", (("m", m),)) + \
    [step(ew(d, "bench_softmax", "{exp}({a} - m[{r}]) / s[{r}]", n, "a", ("m", "s"), cols), out, ins[0], m, s)]

# ---------------------------------------------------------------------------------------------------------------------
# Contenders: a maker, called inside measure() so that one that can't start is an error cell, returns a function that
# runs the op once and returns (seconds, result).

@contextlib.contextmanager
def noopt(on:bool):
  """NOOPT=1 lowers without opts: scalar loads, no vectors. tiny reads it each time it looks up or lowers a kernel."""
  if on: os.environ["NOOPT"] = "1"
  try: yield
  finally:
    if on: del os.environ["NOOPT"]

def tiny_kernel(fn, ins, scalar=False):
  def run():  # the graph is built fresh: while a result of the same graph lives, tiny reuses it and runs nothing
    with noopt(scalar):
      out = fn(*ins)
      items = schedule([out])
      secs = run_schedule(items, wait=True)
      out.realize()  # takes the result just computed (items keep it), so the check reads the kernel that was timed
    assert secs > 0, "tiny ran no kernel: a result of this graph was still alive"
    return secs, out
  return run

def tiny_realize(fn, ins, dev):
  def run():  # one warm realize() as a user sees it: build the graph, schedule, look the kernel up, launch, wait
    start = time.perf_counter()
    out = fn(*ins).realize()
    Device[dev].runtime.synchronize()
    return time.perf_counter() - start, out
  return run

def tiny_python(fn, ins):
  def run():  # Python's share of one realize(): its wall time less its kernels' time, each waited for and timed
    capturing.now = call = Capture(Tensor._counter)  # (a TinyJit's record of a call: its kernels, timed)
    try:
      start = time.perf_counter()
      out = fn(*ins).realize()
      return time.perf_counter() - start - call.seconds, out
    finally: capturing.now = None
  return run

def tiny_jit(fn, ins, dev):
  jit = TinyJit(fn)
  def run():  # a TinyJit call: once the first two calls have captured the kernel, a replay of it on the inputs
    start = time.perf_counter()
    out = jit(*ins)
    Device[dev].runtime.synchronize()
    return time.perf_counter() - start, out
  return run

def tiny_jit_python(fn, ins):
  jit = TinyJit(fn)
  def run():  # Python's share of one replay: its wall time less its kernels' (the same launches again, each timed)
    start = time.perf_counter()
    out = jit(*ins)
    wall = time.perf_counter() - start
    if not jit.replays: return wall, out  # the first two calls, before a replay exists: only ever a warm-up
    replay, = jit.replays.values()
    assert len(replay.new_outputs) == 1 and not replay.held, "one kernel writing one output, as a*b+c"
    mem = [t.buffer().buf for t in ins] + [out.buffer().buf]  # the replay's slots: its inputs, then what it made
    kernels = sum(fn(*[mem[i] for i in l.slots], global_size=l.prog.global_size, local_size=l.prog.local_size,
                     wait=True) for fn, l in replay.launches)
    return wall - kernels, out
  return run

def hand(steps, out, wall=False):
  def run():
    start = time.perf_counter()
    secs = sum(kernel(*ts) for kernel, ts in steps)
    return (time.perf_counter() - start if wall else secs), out
  return run

@dataclass
class Peer:
  name: str
  put: Callable                              # a numpy array -> the peer's tensor on the device
  finish: Callable = lambda y: y             # a lazy result made real
  sync: Callable = lambda: None              # wait for the device
  ops: dict = field(default_factory=dict)    # where the peer spells an op differently from OPS

def peer(p:Peer, fn:Callable, arrays:list):
  xs = [p.put(a) for a in arrays]
  def run():
    start = time.perf_counter()
    y = p.finish(fn(*xs))
    p.sync()
    return time.perf_counter() - start, y
  return run

def optional(name:str):
  try: return importlib.import_module(name)
  except ImportError: return None

def find_peers(dev:str) -> list[Peer]:
  """Inputs reach the peers as numpy arrays, so without numpy there are none; numpy itself runs on the CPU only."""
  if (np := optional("numpy")) is None: return []
  def softmax(x): e = np.exp(x - x.max(-1, keepdims=True)); return e / e.sum(-1, keepdims=True)
  peers = [Peer("numpy", lambda x: x, ops={"softmax": softmax})] if dev == "CPU" else []
  if torch := optional("torch"):
    where = {"CPU": "cpu", "CUDA": "cuda", "METAL": "mps"}[dev]
    sync = {"cuda": torch.cuda.synchronize, "mps": lambda: torch.mps.synchronize()}.get(where, lambda: None)
    peers.append(Peer("torch", lambda x: torch.from_numpy(x).to(where), sync=sync))
  if tg := optional("tinygrad"):
    peers.append(Peer("tinygrad", lambda x: tg.Tensor(x, device=dev).realize(),
                      finish=lambda y: y.realize(), sync=lambda: tg.Device[dev].synchronize()))
  return peers

def flat(y):
  """A contender's result as flat floats on the host."""
  if isinstance(y, Tensor): return y.buffer().copyout().cast("f")
  import numpy as np
  y = y.cpu() if hasattr(y, "cpu") else y  # torch: off the GPU first
  return np.asarray(y.numpy() if hasattr(y, "numpy") else y).reshape(-1)

def measure(makers:dict[str, Callable], want:dict[int, float], reps:int, budget:float) -> dict[str, float|str]:
  """Check each contender's first result (that call compiles too), warm each up once, then time them in rounds of one
  call each, for `reps` rounds or until `budget` seconds have passed (3 rounds at least), each round in the order of
  the last moved by one: what one contender leaves behind (a cache filled, a pool still awake) falls on each other."""
  out, runs = {}, {}
  for name, make in makers.items():
    try:
      run = make()
      got = flat(run()[1])
      if all(abs(got[i] - w) <= 1e-3 * abs(w) for i, w in want.items()): runs[name] = run
      else: out[name] = "WRONG"
    except Exception as e:  # a peer without this device, a compiler missing: its cell says so, the others still run
      out[name] = "error"
      print(f"\n{name}: {type(e).__name__}: {e}", file=sys.stderr)
  for run in runs.values(): run()
  times: dict[str, list[float]] = {name: [] for name in runs}
  start = time.perf_counter()
  names = list(runs)
  for i in range(reps):
    for name in names[i % len(names):] + names[:i % len(names)]:  # (rotated: no contender always follows another)
      times[name].append(runs[name]()[0])
    if i >= 2 and time.perf_counter() - start > budget: break
  return out | {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}  # medians

# ---------------------------------------------------------------------------------------------------------------------
# Rows: vector add, scalar vs vectors; VMA, sum and softmax over sizes; a row softmax and matmuls; then the fixed
# cost per call: a warm realize() of a+b and of a*b+c, and a TinyJit replay of a*b+c.

def label(n:int) -> str: return f"{n // 10**6}M" if n % 10**6 == 0 else f"{n // 1000}K" if n % 1000 == 0 else str(n)
def parse_sizes(text:str) -> list[int]:
  return [int(float(s[:-1]) * {"K": 1e3, "M": 1e6}[s[-1]]) if s[-1] in "KM" else int(s) for s in text.split(",")]

@dataclass
class Row:
  op: str
  shape: tuple
  name: str
  scalar: bool = False    # tiny with NOOPT: its scalar kernel
  realize: bool = False   # a dispatch row: tiny's whole realize(), and Python's share of it
  jit: bool = False       # a dispatch row: a TinyJit replay, and Python's share of it
  @property
  def size(self) -> str: return "x".join(map(str, self.shape)) if len(self.shape) > 1 else label(self.shape[0])
  @property
  def out_shape(self) -> tuple: return () if self.op == "sum" else self.shape
  @property
  def bytes(self) -> int: return 4 * (ARITY[self.op] * math.prod(self.shape) + math.prod(self.out_shape))
  @property
  def flops(self) -> int: return 2 * self.shape[0] ** 3 if self.op == "matmul" else 0

def make_rows(sizes:list[int], quick:bool) -> list[Row]:
  rows = [Row("add", (10**6,), "vector add, scalar", scalar=True), Row("add", (10**6,), "vector add, vectors")]
  rows += [Row(op, (n,), name) for op, name in (("vma", "vma d=a*b+c"), ("sum", "sum"), ("softmax", "softmax"))
           for n in sizes]
  if not quick: rows.append(Row("softmax", (4096, 1024), "row softmax"))
  rows += [Row("matmul", (n, n), "matmul") for n in ((256,) if quick else (256, 512, 1024))]
  return rows + [Row("add", (10**6,), "realize() a+b", realize=True),
                 Row("vma", (10**5,), "realize() a*b+c", realize=True),
                 Row("vma", (16,), "realize() a*b+c", realize=True), Row("vma", (16,), "TinyJit a*b+c", jit=True)]

def bench(row:Row, dev:str, peers:list[Peer], reps:int, budget:float) -> dict:
  ins = [Tensor.rand(*row.shape, device=dev).realize() for _ in range(ARITY[row.op])]
  n, ref = math.prod(row.out_shape), REFS[row.op]([t.buffer().copyout().cast("f") for t in ins], row.shape)
  want = {i: ref(i) for i in {0, n // 2, n - 1, *random.Random(0).sample(range(n), min(n, 30))}}
  fn, out = OPS.get(row.op), Tensor.empty(*row.out_shape, device=dev).realize()
  arrays = [t.numpy() for t in ins] if peers else []
  if row.realize: makers = {"realize": lambda: tiny_realize(fn, ins, dev), "python": lambda: tiny_python(fn, ins)}
  elif row.jit: makers = {"realize": lambda: tiny_jit(fn, ins, dev), "python": lambda: tiny_jit_python(fn, ins)}
  else: makers = {"tiny": lambda: tiny_kernel(fn, ins, row.scalar)} if fn else {}  # the peak's copy has no tiny
  makers["baseline"] = lambda: hand(plan(row.op, row.shape, ins, out, dev), out, wall=row.realize or row.jit)
  makers |= {p.name: functools.partial(peer, p, p.ops.get(row.op, OPS[row.op]), arrays) for p in peers}
  result = measure(makers, want, reps, budget)
  if fn:
    with noopt(row.scalar): result["kernels"] = [p.name for p in render(fn(*ins))]
  return result

# Whole programs, where the scheduler decides what to store: tiny's realize() of the program beside the same work
# with its dear part stored first (exp(x), then the matmul) or beside its matmuls alone (the MLP), and the peers
# that spell the program as tiny does. Each result is checked against the program run one op at a time.

def mlp(x, w1, w2, w3): return (((x @ w1).relu() @ w2).relu() @ w3).log_softmax(-1)
def mlp_stepwise(x, w1, w2, w3):
  for w in (w1, w2): x = (x @ w).realize().relu().realize()
  return (x @ w3).realize().log_softmax(-1)

@dataclass
class Program:
  name: str
  shapes: list[tuple]
  fn: Callable
  baseline: Callable|None  # tensors -> the steps tiny times instead: each a tensor, or a function of the last result
  stepwise: Callable  # the program one op at a time: what the results are checked against

PROGRAMS = [
  Program("x.exp() @ w, vs stored", [(256, 1000), (1000, 64)], lambda x, w: x.exp() @ w,
          lambda x, w: [x.exp(), lambda e: e @ w], lambda x, w: x.exp().realize() @ w),
  Program("MLP fwd, vs its matmuls", [(256, 784), (784, 512), (512, 512), (512, 10)], mlp,
          lambda x, w1, w2, w3: [x @ w1, lambda h: h @ w2, lambda h: h @ w3], mlp_stepwise),
]

# Composites tiny builds from its primitives, beside the peers' kernels: a convolution's windows summed (one reduce),
# rows picked by an index (compares with an arange, summed: a pick once lowered), a scan in blocks. No baseline.
def conv(x, w):  # (torch spells it as a function)
  return x.conv2d(w, padding=1) if hasattr(x, "conv2d") else sys.modules["torch"].nn.functional.conv2d(x, w, padding=1)
COMPOSITES = [
  Program("conv2d 3x3, 32->64 channels", [(32, 32, 32, 32), (64, 32, 3, 3)], conv, None, conv),
  Program("x[idx]: 4096 rows of 50000", [(50000, 256), (4096,)], lambda w, r: w[(r * 50000).int()], None,
          lambda w, r: w[(r * 50000).int()]),
  Program("cumsum", [(10**6,)], lambda x: x.cumsum(0), None, lambda x: x.cumsum(0)),
]

def program_row(prog:Program, dev:str, peers:list[Peer], reps:int, budget:float) -> dict:
  ins = [(Tensor.rand(*s, device=dev) - 0.5).realize() for s in prog.shapes]
  checked = prog.stepwise(*ins).realize()
  want = dict(enumerate(flat(checked)[:64]))
  def timed(steps):  # each step realized before the next starts
    start, out = time.perf_counter(), None
    for step in steps: out = (step(out) if callable(step) else step).realize()
    Device[dev].runtime.synchronize()
    return time.perf_counter() - start, out
  makers = {"tiny": lambda: lambda: timed([prog.fn(*ins)])}
  if prog.baseline: makers["baseline"] = lambda: lambda: (timed(prog.baseline(*ins))[0], checked)  # (no result)
  arrays = [t.numpy() for t in ins] if peers else []
  makers |= {p.name: functools.partial(peer, p, prog.fn, arrays) for p in peers if p.name != "numpy"}
  r = measure(makers, want, reps, budget)
  tiny, base = r["tiny"], r.get("baseline", "—")
  return {"name": prog.name, "size": "x".join(map(str, prog.shapes[0])), "shape": prog.shapes[0], "bytes": 0,
          "flops": 0, "tiny": tiny, "baseline": base, "seconds": {p.name: "—" for p in peers} | r,
          "gb_per_s": None, "gflop_per_s": None, "pct_peak": None, "python_seconds": None,
          "vs_baseline": tiny / base if isinstance(tiny, float) and isinstance(base, float) else None,
          "kernels": [k.name for k in render(prog.fn(*ins))]}

# The first call of a program in a new process: with an empty disk cache, everything is lowered and compiled; with a
# warm one (the same program run before), nothing is. Each in its own interpreter, timed from inside it.
FIRST_CALL = """
import sys, time
from tiny import Tensor, schedule, run_schedule
x, w1, w2 = [Tensor.rand(*s, device=sys.argv[1]).realize() for s in ((256, 784), (784, 512), (512, 10))]
start = time.perf_counter()
kernels = run_schedule(schedule([((x @ w1).relu() @ w2).softmax(-1)]), wait=True)
print(time.perf_counter() - start, kernels)
"""

def first_calls(dev:str, peers:list[Peer]) -> list[dict]:
  rows, env = [], os.environ | {"TINY_CACHE": tempfile.mkdtemp(prefix="tiny-bench-")}
  for size in ("cold cache", "warm cache"):
    run = subprocess.run([sys.executable, "-c", FIRST_CALL, dev], env=env, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    wall, kernels = map(float, run.stdout.split()) if run.returncode == 0 else ("error", 0.0)
    rows.append({"name": "first call: MLP 256x784x512x10", "size": size, "shape": (), "bytes": 0, "flops": 0,
                 "tiny": wall, "baseline": "—", "seconds": {p.name: "—" for p in peers}, "gb_per_s": None,
                 "gflop_per_s": None, "pct_peak": None, "vs_baseline": None, "kernels": [],
                 "python_seconds": wall - kernels if run.returncode == 0 else None})
  shutil.rmtree(env["TINY_CACHE"], ignore_errors=True)
  return rows

# Whole model steps at batch 1 or 64, as a user runs them: an MLP's inference, a decoder layer's step over a key-value
# cache, a training step with Adam, and GPT-2 generating tokens. tiny and tinygrad run the same code (their Tensors
# spell it alike); torch its own. Each library alone in a process of its own (a peer's thread pool would slow the next
# contender), each step timed after warm-up: tiny eagerly (realize) and under TinyJit, torch eagerly, tinygrad under
# its TinyJit.
MODEL_STEP = r"""
import os, sys, time, json, math, random
model, lib, dev, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
weights = sys.argv[5] if len(sys.argv) > 5 else ""  # a GPT-2 safetensors file (Hugging Face's names), else random
os.environ.setdefault("DEV", dev)  # tinygrad's default device, where its layers are made
os.environ.setdefault("TRAINING", "1")  # (tinygrad 0.14's optimizers ask for it)
rng = random.Random(0)
SHAPES = {"mlp": (1, 784, 512, 10), "decoder": (1, 256, 4, 64), "gpt2": (12, 768, 12, 128)}  # layers, d, heads, cache

if lib == "torch":
  import torch
  torch.set_grad_enabled(model == "train")  # inference as torch's users run it: no autograd records
  F = torch.nn.functional
  def gelu(x): return F.gelu(x, approximate="tanh")
  def layernorm(x, w, b): return F.layer_norm(x, x.shape[-1:], w, b)
  def new(*shape, std=0.02): return torch.randn(*shape) * std
  ones, zeros, arange = torch.ones, torch.zeros, torch.arange
  def write(cache, at, value): cache[:, at:at + 1] = value  # in place, at the token's position (an int)
else:
  if lib == "tinygrad": from tinygrad import Tensor, TinyJit, nn, dtypes
  else: from tiny import Tensor, TinyJit, nn, dtypes
  Tensor.manual_seed(0)
  def gelu(x): return x.gelu()
  def layernorm(x, w, b): return x.layernorm() * w + b
  def new(*shape, std=0.02): return (Tensor.randn(*shape) * std).realize()
  def ones(*shape): return Tensor.ones(*shape).contiguous().realize()
  def zeros(*shape): return Tensor.zeros(*shape).contiguous().realize()
  arange = Tensor.arange
  def write(cache, at, value):  # at the token's position (a tensor: the same kernels for every position)
    cache.assign((Tensor.arange(cache.shape[1]).reshape(1, -1, 1) == at).where(value, cache))

class Decoder:  # GPT-2's layers, in its weights' names and layout (x @ w + b), over a key-value cache of `ctx` tokens
  def __init__(self, layers, d, heads, ctx, vocab=0, state=None):
    self.d, self.heads, self.ctx, self.vocab = d, heads, ctx, vocab
    shapes = {"ln_1.weight": (d,), "ln_1.bias": (d,), "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
              "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,), "ln_2.weight": (d,), "ln_2.bias": (d,),
              "mlp.c_fc.weight": (d, 4 * d), "mlp.c_fc.bias": (4 * d,), "mlp.c_proj.weight": (4 * d, d),
              "mlp.c_proj.bias": (d,)}
    made = {f"h.{i}.{k}": (ones if k.startswith("ln") and k.endswith("weight") else zeros if k.endswith("bias")
                           else new)(*shape) for i in range(layers) for k, shape in shapes.items()}
    if vocab: made |= {"wte.weight": new(vocab, d), "wpe.weight": new(1024, d, std=0.01), "ln_f.weight": ones(d),
                       "ln_f.bias": zeros(d)}
    self.w = state or made
    self.caches = [(zeros(heads, ctx, d // heads), zeros(heads, ctx, d // heads)) for _ in range(layers)]
  def layer(self, i, x, pos):  # x: (1, d)
    w, (keys, values), h, n = (lambda k: self.w[f"h.{i}.{k}"]), self.caches[i], self.heads, self.d // self.heads
    q, k, v = (layernorm(x, w("ln_1.weight"), w("ln_1.bias")) @ w("attn.c_attn.weight") + w("attn.c_attn.bias")) \
      .reshape(3, h, 1, n).split(1)
    write(keys, pos, k.reshape(h, 1, n)); write(values, pos, v.reshape(h, 1, n))
    scores = (q.reshape(h, 1, n) @ keys.transpose(1, 2)) / math.sqrt(n)
    attended = ((arange(self.ctx) <= pos).where(scores, -math.inf) if lib != "torch" else
                scores.masked_fill(arange(self.ctx) > pos, -math.inf)).softmax(-1) @ values
    x = x + attended.reshape(1, self.d) @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
    up = gelu(layernorm(x, w("ln_2.weight"), w("ln_2.bias")) @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"))
    return x + up @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
  def __call__(self, x, pos):  # a token's hidden state, or (with a vocabulary) a token, to the next token
    if self.vocab: x = self.w["wte.weight"][x] + self.w["wpe.weight"][pos]
    for i in range(len(self.caches)): x = self.layer(i, x, pos)
    if not self.vocab: return x
    return (layernorm(x, self.w["ln_f.weight"], self.w["ln_f.bias"]) @ self.w["wte.weight"].T).argmax(-1)

def mlp_parts():
  x = [[rng.uniform(-1, 1) for _ in range(784)]]
  if lib == "torch":
    l1, l2 = torch.nn.Linear(784, 512), torch.nn.Linear(512, 10)
    return lambda x: l2(l1(x).relu()).softmax(-1), [torch.tensor(x)]
  l1, l2 = nn.Linear(784, 512), nn.Linear(512, 10)
  Tensor.realize(*nn.state.get_parameters([l1, l2]))  # (as weights loaded from a file would be)
  return lambda x: l2(l1(x).relu()).softmax(-1), [Tensor(x).realize()]

def train_parts():
  data = [[rng.uniform(-1, 1) for _ in range(784)] for _ in range(64)], [rng.randrange(10) for _ in range(64)]
  if lib == "torch":
    l1, l2 = torch.nn.Linear(784, 256), torch.nn.Linear(256, 10)
    opt = torch.optim.Adam(list(l1.parameters()) + list(l2.parameters()), lr=1e-3)
    def step(x, y):
      opt.zero_grad()
      loss = F.cross_entropy(l2(l1(x).relu()), y)
      loss.backward()
      opt.step()
      return loss
    return step, [torch.tensor(data[0]), torch.tensor(data[1])]
  Tensor.training = True  # (older tinygrad's optimizers ask for it)
  l1, l2 = nn.Linear(784, 256), nn.Linear(256, 10)
  opt = nn.optim.Adam(nn.state.get_parameters([l1, l2]), lr=1e-3)
  def step(x, y):
    opt.zero_grad()
    loss = -l2(l1(x).relu()).log_softmax(-1).mul(y).sum(-1).mean()
    loss.backward()
    opt.step()
    return loss
  return step, [Tensor(data[0]).realize(), Tensor([[float(c == k) for k in range(10)] for c in data[1]]).realize()]

def decoder_parts(layers, d, heads, ctx, vocab=0):
  state = None
  if weights and lib == "torch": state = {k: torch.tensor(v.numpy()) for k, v in safe_open(weights).items()}
  elif weights: state = {k: v.to(dev).float().realize() for k, v in nn.state.safe_load(weights).items()}
  if state: state = {k.removeprefix("transformer."): v for k, v in state.items()}
  net = Decoder(layers, d, heads, ctx, vocab, state)
  tensor = torch.tensor if lib == "torch" else lambda v: Tensor(v).realize()
  token = tensor([0] if vocab else [[rng.uniform(-1, 1) for _ in range(d)]])
  positions = [i if lib == "torch" else tensor([i]) for i in range(ctx)]  # (torch indexes by an int)
  return net, token, positions

def safe_open(path):
  from safetensors.numpy import load_file
  return load_file(path)

sizes = SHAPES.get(model)
if model == "mlp": fn, args = mlp_parts()
elif model == "train": fn, args = train_parts()
else:
  net, token, positions = decoder_parts(*sizes, vocab=50257 if model == "gpt2" else 0)
  fn, at = net, iter(positions * (steps + 10))
if lib != "torch": run = (TinyJit(fn) if lib != "tiny" else fn)
else: run = fn
def call():
  if model in ("decoder", "gpt2"):
    global token
    out = run(token if model == "decoder" else token, next(at))
    if model == "gpt2": token = out
  else: out = run(*args)
  if lib == "torch": return float(out.reshape(-1)[0])  # (eager: done once the value is there)
  return out.realize().tolist() if model != "train" else out.item()
first = [call() for _ in range(5)]
times = []
for _ in range(steps):
  start = time.perf_counter(); last = call(); times.append(time.perf_counter() - start)
info = {"seconds": sorted(times)[len(times) // 2]}
if model == "train": info["learns"] = last < first[0]
if lib == "tiny-jit":
  replay, = run.replays.values()
  info |= {"kernels": len(replay.launches),
           "bytes": sum(b.size * b.dtype.itemsize for b in replay.held) +
                    sum(n * d.itemsize for _, n, d in replay.new_outputs)}
print(json.dumps(info))
"""

MODELS = {"mlp": ("step: MLP 784-512-10", "batch 1"), "decoder": ("step: decoder layer, d=256", "64-token cache"),
          "train": ("train step: MLP 784-256-10, Adam", "batch 64"), "gpt2": ("GPT-2 124M: a token", "batch 1")}

def model_row(model:str, dev:str, peers:list[Peer], steps:int, weights:str="") -> dict:
  def timed(lib:str) -> dict:
    run = subprocess.run([sys.executable, "-c", MODEL_STEP, model, lib, dev, str(steps), weights], capture_output=True,
                         text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
    if run.returncode != 0: print(f"\n{model}, {lib}: {run.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return json.loads(run.stdout) if run.returncode == 0 else {"seconds": "error"}
  jit, eager = timed("tiny-jit"), timed("tiny")
  times = {p.name: timed(p.name)["seconds"] if p.name in ("torch", "tinygrad") else "—" for p in peers}
  tiny = "WRONG" if not jit.get("learns", True) else jit["seconds"]
  torch = times.get("torch")
  def vs_torch(s): return f"{s / torch:.2f}x torch" if isinstance(s, float) and isinstance(torch, float) else "—"
  notes = f"TinyJit {vs_torch(tiny)}; baseline: realize() {vs_torch(eager['seconds'])}; " \
          f"{jit.get('kernels', '?')} kernels, {jit.get('bytes', 0) / 2**20:.1f} MB of buffers"
  if model == "gpt2" and isinstance(tiny, float):
    notes += f"; {1 / tiny:.1f} tokens/s" + (f" (torch {1 / torch:.1f})" if isinstance(torch, float) else "")
  name, size = MODELS[model]
  return {"name": name, "size": size, "shape": (), "bytes": 0, "flops": 0, "tiny": tiny, "baseline": eager["seconds"],
          "seconds": times | {"tiny": tiny, "baseline": eager["seconds"]}, "gb_per_s": None, "gflop_per_s": None,
          "pct_peak": None, "python_seconds": None,
          "vs_baseline": tiny / eager["seconds"] if isinstance(tiny, float) and isinstance(eager["seconds"], float)
                         else None, "kernels": [notes]}

# ---------------------------------------------------------------------------------------------------------------------
# The table, and the same numbers as JSON.

def summary(row:Row, r:dict, peak:float) -> dict:
  """What a row shows: tiny's time (the whole realize() in a dispatch row), its rate, and how it compares."""
  tiny, base = r["realize" if row.realize or row.jit else "tiny"], r["baseline"]
  ok = isinstance(tiny, float)
  python = r["python"] if ok and isinstance(r.get("python"), float) else None
  return {"name": row.name, "size": row.size, "shape": row.shape, "bytes": row.bytes, "flops": row.flops,
          "tiny": tiny, "baseline": base, "seconds": {k: v for k, v in r.items() if k != "kernels"},
          "gb_per_s": row.bytes / tiny * 1e-9 if ok else None,
          "gflop_per_s": row.flops / tiny * 1e-9 if ok and row.flops else None,
          "pct_peak": 100 * row.bytes / tiny / peak if ok and not row.flops else None,  # matmul is compute, not memory
          "vs_baseline": tiny / base if ok and isinstance(base, float) else None,
          "python_seconds": python, "kernels": r.get("kernels", [])}

def fmt_time(s) -> str:
  if isinstance(s, str): return s
  return f"{s*1e6:.1f} µs" if s < 1e-3 else f"{s*1e3:.2f} ms" if s < 1 else f"{s:.2f} s"

def table(rows:list[dict], peers:list[Peer]) -> list[str]:
  head = ["op", "size", "tiny", "rate", "% peak", "baseline", *[p.name for p in peers], "tiny/base", "kernels, notes"]
  lines = [head]
  for s in rows:
    rate = f"{s['gflop_per_s']:.2f} GFLOP/s" if s["gflop_per_s"] else \
      f"{s['gb_per_s']:.2f} GB/s" if s["gb_per_s"] else "—"
    python = s["python_seconds"]
    note = [f"python {fmt_time(python)} = {100 * python / s['tiny']:.0f}%,"] if python is not None else []
    lines.append([s["name"], s["size"], fmt_time(s["tiny"]), rate,
                  f"{s['pct_peak']:.0f}%" if s["pct_peak"] is not None else "—", fmt_time(s["baseline"]),
                  *[fmt_time(s["seconds"][p.name]) for p in peers],
                  f"{s['vs_baseline']:.2f}x" if s["vs_baseline"] else "—", " ".join(note + s["kernels"])])
  widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
  def align(c, cell): return cell.ljust(widths[c]) if c < 2 or c == len(head) - 1 else cell.rjust(widths[c])
  return ["  ".join(align(c, cell) for c, cell in enumerate(line)).rstrip() for line in lines]

def describe(dev:str) -> str:
  if dev != "CPU": return Device[dev].runtime.compiler_id
  model = platform.processor() or platform.machine()
  with contextlib.suppress(OSError, StopIteration):  # Linux names the model here; platform doesn't
    model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
  return f"{model}, {CORES} cores"

def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", type=str.upper, choices=sorted(DIALECTS), help="default: tiny's default device")
  parser.add_argument("--quick", action="store_true", help="a few rows at 1M elements: CI's smoke run")
  parser.add_argument("--sizes", type=parse_sizes, default="100K,1M,10M", help="element counts of vma, sum and softmax")
  parser.add_argument("--big", action="store_true", help="100M elements too (VMA moves 1.6 GB)")
  parser.add_argument("--gpt2", metavar="PATH", default="",
                      help="GPT-2's weights as safetensors (Hugging Face's model.safetensors), else random ones")
  parser.add_argument("--json", metavar="PATH", help="write the results, with device, versions and date, here")
  args = parser.parse_args()
  dev = args.device or Device.DEFAULT
  if dev not in DIALECTS: parser.error(f"bench runs on {', '.join(DIALECTS)}, not {dev}")
  try: Device[dev]
  except (RuntimeError, OSError) as e: parser.error(f"can't open {dev}: {e}")
  reps, budget = (5, 0.3) if args.quick else (50, 2.0)
  peers, rows = find_peers(dev), make_rows([10**6] if args.quick else args.sizes + [10**8] * args.big, args.quick)
  tty = sys.stderr.isatty()
  def progress(text): print(f"\r{text}\x1b[K" if tty else text, end="" if tty else "\n", file=sys.stderr, flush=True)

  progress("peak bandwidth: a copy through a hand-written kernel")
  copy = Row("copy", (1 << (24 if args.quick else 25),), "copy")  # 64 or 128 MB: more than any cache
  if not isinstance(secs := bench(copy, dev, [], reps, budget)["baseline"], float):
    sys.exit(f"bench: the copy that measures peak bandwidth gave {secs}; no % can be computed without it")
  peak = copy.bytes / secs
  results = []
  for i, row in enumerate(rows):
    progress(f"[{i+1}/{len(rows)}] {row.name} {row.size}")
    results.append(summary(row, bench(row, dev, peers, reps, budget), peak))
  if not args.quick:
    for prog in PROGRAMS + COMPOSITES:
      progress(prog.name)
      results.append(program_row(prog, dev, peers, reps, budget))
  for model in ["train"] if args.quick else MODELS:
    progress(f"{MODELS[model][0]}, each library in its own process")
    results.append(model_row(model, dev, peers, 20 if args.quick else 20 if model == "gpt2" else 200, args.gpt2))
  progress("first calls in a new process")
  results += first_calls(dev, peers)
  progress("")

  print(f"tiny on {dev} ({describe(dev)}): peak {peak * 1e-9:.1f} GB/s, by a {copy.bytes // 2 >> 20} MB copy.")
  print("tiny and baseline: kernel time; realize() rows and peers: wall time; each a median of interleaved runs.\n"
        "% is of that peak: data that fits in a cache, an op that reads more than it writes, or stores past the cache "
        "can pass 100%.\n")
  print("\n".join(table(results, peers)))
  print("\nFor scale, figures quoted for tinygrad, not measured here: 37 µs of Python in a 70 µs call (1M add, CUDA),"
        " and about 3 ms a call (100K VMA, H100).")
  if args.json:
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    versions = {"python": platform.python_version(), "tiny": git or None}
    versions |= {p.name: importlib.metadata.version(p.name) for p in peers}
    report = {"device": dev, "description": describe(dev), "compiler": Device[dev].runtime.compiler_id,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "versions": versions, "peak_bytes_per_second": peak, "rows": results}
    with open(args.json, "w") as f: json.dump(report, f, indent=1)

if __name__ == "__main__":
  main()
