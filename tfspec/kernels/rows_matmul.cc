// A few-row float32 matrix product for XLA:CPU, called as an XLA custom call.
//
//   y[M, N] = x[M, K] . w[K, N]      M small (the k + 1 rows of a verify pass)
//
// Why it exists: XLA:CPU emits a one-row product as a tiled GEMV that streams the weights at
// close to memory bandwidth, but a product of 2..~16 rows goes to Eigen's GEMM, which packs
// the whole weight matrix on every call; on the embedded target a 5-row product costs 4-10x
// the 1-row one although both read the same bytes (bench/results/rows_matmul.json). This
// kernel reads every weight once per block of up to 12 rows (AVX-512; 6 with AVX2), from a
// panel-major copy of the weights made once per request (see tfspec/kernels/__init__.py),
// with register-resident accumulators and a software prefetch ahead of the stream, and
// splits the panels across threads.
//
// Weight layout ("panels"): w_panels[P, K, 16], P = ceil(N / 16); panel p holds columns
// 16p .. 16p + 15 of w, row-major over k, zero-padded past N. A row-major [K, N] matrix walked
// column strip by column strip touches a new 4 KB page on every k (no hardware prefetch across
// pages); a panel is one contiguous stream.
//
// Half-width panels (tfspec_rows_matmul_bf16w): the same layout holding the upper 16 bits of
// each float32 weight (bfloat16). They are made only for weights whose lower 16 bits are
// all zero (bfloat16 checkpoints loaded as float32), so widening them back (a 16-bit shift)
// gives the float32 weights bit for bit and the products are identical to the float32
// panels' while half the bytes stream from memory: a decode step is bandwidth-bound.
//
// Exactness: every output element is the same sequence of float32 FMAs over k = 0 .. K-1,
// whatever M, the row block, the thread or the instruction set (portable, AVX2, AVX-512):
// rows do not depend on their companions, and machines with different vector units decode
// the same tokens.
//
// Custom-call ABI: XLA's API_VERSION_STATUS_RETURNING_UNIFIED (what TensorFlow's
// XlaCustomCallV2 emits): out = array of result pointers, in = operand pointers, opaque =
// the backend config "M,K,N", or "M,K,N,G" with a third operand: the live rows of each
// group of G rows (see LiveRowsMatmul).

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace xla {
// Declared here, defined in TensorFlow's libtensorflow_cc (exported symbols); only these two
// non-virtual members are used, so no layout of the class is needed.
class CustomCallTargetRegistry {
 public:
  static CustomCallTargetRegistry* Global();
  void Register(const std::string& symbol, void* address, const std::string& platform);
};
}  // namespace xla

struct XlaCustomCallStatus_;

namespace {

constexpr long kPanel = 16;  // output columns per panel: two 8-float AVX registers
constexpr int kMaxRows = 6;  // AVX2 rows per register block: 12 accumulators + 2 weights + 1
// AVX-512 rows per register block: 12 accumulators + 1 weight + 1 broadcast of the 32
// registers. A k = 8..11 verify (9..12 rows) then reads each weight once, not twice.
constexpr int kMaxRows512 = 12;
// How far ahead in a panel's stream the kernels prefetch (bytes). A panel is one contiguous
// stream, yet with 2..12 rows the hardware prefetcher alone kept too few lines in flight:
// a 5-row product of float32 weights streamed from memory at 24 GB/s against 34 GB/s for
// one row (t5-base's [768, 3072], bench.rows_matmul). With this prefetch both stream at
// ~38-42 GB/s, so a 5-row verify product costs what a 1-row step's does. 2 KB measured best
// of 0.5-4 KB; weights resident in L3 (the embedded target) neither gain nor lose.
constexpr long kPrefetchBytes = 2048;

struct Dims {
  long m = 0, k = 0, n = 0;
};

bool ParseDims(const char* opaque, size_t len, Dims* d) {
  std::string s(opaque, len);
  return sscanf(s.c_str(), "%ld,%ld,%ld", &d->m, &d->k, &d->n) == 3 && d->m > 0 &&
         d->k > 0 && d->n > 0;
}

// PanelAvx2, one panel for R <= 6 rows (PanelsAvx512 takes up to 12):
// y[r, c0 .. c0 + 16) = x[r, :] . panel, r < R, where panel is [K, 16] contiguous (columns
// c0 .. c0 + 15 of w). Each weight is loaded once for all R rows; the R x 16 accumulators
// are named registers (an array of __m256 was spilled to the stack on every k by GCC 12).
// y[r, c] is the fused multiply-add chain over k = 0 .. K-1 in order, whatever R, the panel
// range or the thread.
// The 16 weights of panel row k as two 8-float registers: float32 panels load them, half-width
// (bfloat16 bit) panels widen 16 x 16 bits to the float32 bit patterns they stand for.
__attribute__((target("avx2"))) inline void LoadRow(const float* row, __m256* w0, __m256* w1) {
  *w0 = _mm256_loadu_ps(row);
  *w1 = _mm256_loadu_ps(row + 8);
}
__attribute__((target("avx2"))) inline void LoadRow(const uint16_t* row, __m256* w0,
                                                    __m256* w1) {
  const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
  const __m256i low = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(halves));
  const __m256i high = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(halves, 1));
  *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(low, 16));
  *w1 = _mm256_castsi256_ps(_mm256_slli_epi32(high, 16));
}

inline float Widen(float w) { return w; }
inline float Widen(uint16_t w) {
  const uint32_t bits = static_cast<uint32_t>(w) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

// Prefetches the line kPrefetchBytes ahead of panel row k, once per 64-byte line (every row
// of a float32 panel, every other row of a half-width one).
inline void Prefetch(const float* panel, long k) {
  _mm_prefetch(reinterpret_cast<const char*>(panel + k * kPanel) + kPrefetchBytes,
               _MM_HINT_T0);
}
inline void Prefetch(const uint16_t* panel, long k) {
  if ((k & 1) == 0) {
    _mm_prefetch(reinterpret_cast<const char*>(panel + k * kPanel) + kPrefetchBytes,
                 _MM_HINT_T0);
  }
}

// The 16 weights of panel row k as one 16-float AVX-512 register.
__attribute__((target("avx512f"))) inline __m512 LoadRow512(const float* row) {
  return _mm512_loadu_ps(row);
}
__attribute__((target("avx512f"))) inline __m512 LoadRow512(const uint16_t* row) {
  const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

// PanelAvx2's product with one 16-float register per row and panel, over NP consecutive
// panels at once: up to 12 rows per pass (6 over four panels), and half the instructions
// per row. Each broadcast of x[r, k] feeds NP FMAs, and a thread keeps NP weight streams in
// flight and NP x R independent FMA chains. The same FMA chain over k per element, so the
// results are bit for bit those of PanelAvx2 and PanelScalar. `columns` applies to the
// last of the NP panels (an N that is not a multiple of 16 stores only those).
template <int R, int NP, typename W>
__attribute__((target("avx512f"))) void PanelsAvx512(const float* x, long k_dim,
                                                    const W* panel, float* y, long n_dim,
                                                    long columns) {
  const long stride = k_dim * kPanel;
  __m512 acc[NP][R];
#pragma GCC unroll 4
  for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[p][r] = _mm512_setzero_ps();
  }
  for (long k = 0; k < k_dim; ++k) {
    __m512 w[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      Prefetch(panel + p * stride, k);
      w[p] = LoadRow512(panel + p * stride + k * kPanel);
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * k_dim + k]);
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[p][r] = _mm512_fmadd_ps(xr, w[p], acc[p][r]);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < NP; ++p) {
    const long cols = p == NP - 1 ? columns : kPanel;
    const __mmask16 mask = cols == kPanel ? static_cast<__mmask16>(0xFFFF)
                                          : static_cast<__mmask16>((1u << cols) - 1u);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * n_dim + p * kPanel, mask, acc[p][r]);
  }
}

template <int R, typename W>
__attribute__((target("avx2,fma"))) void PanelAvx2(const float* x, long k_dim,
                                                   const W* panel, float* y, long n_dim,
                                                   long columns) {
  __m256 a0 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps();
  __m256 a1 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps();
  __m256 a3 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
  __m256 a4 = _mm256_setzero_ps(), b4 = _mm256_setzero_ps();
  __m256 a5 = _mm256_setzero_ps(), b5 = _mm256_setzero_ps();
  for (long k = 0; k < k_dim; ++k) {
    __m256 w0, w1;
    Prefetch(panel, k);
    LoadRow(panel + k * kPanel, &w0, &w1);
#define TFSPEC_FMA(r)                                                         \
  if constexpr (R > r) {                                                      \
    const __m256 xb = _mm256_broadcast_ss(x + r * k_dim + k);                 \
    a##r = _mm256_fmadd_ps(xb, w0, a##r);                                     \
    b##r = _mm256_fmadd_ps(xb, w1, b##r);                                     \
  }
    TFSPEC_FMA(0) TFSPEC_FMA(1) TFSPEC_FMA(2) TFSPEC_FMA(3) TFSPEC_FMA(4) TFSPEC_FMA(5)
#undef TFSPEC_FMA
  }
  if (columns == kPanel) {
#define TFSPEC_STORE(r)                                                       \
  if constexpr (R > r) {                                                      \
    _mm256_storeu_ps(y + r * n_dim, a##r);                                    \
    _mm256_storeu_ps(y + r * n_dim + 8, b##r);                                \
  }
    TFSPEC_STORE(0) TFSPEC_STORE(1) TFSPEC_STORE(2) TFSPEC_STORE(3) TFSPEC_STORE(4) TFSPEC_STORE(5)
#undef TFSPEC_STORE
    return;
  }
  // The last panel of an N that is not a multiple of 16: its padding columns (zero weights)
  // are computed but only the first `columns` exist in y.
  alignas(32) float tail[2 * kMaxRows][8];
  const __m256 acc[2 * kMaxRows] = {a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5};
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(tail[2 * r], acc[2 * r]);
    _mm256_store_ps(tail[2 * r + 1], acc[2 * r + 1]);
    for (long c = 0; c < columns; ++c) y[r * n_dim + c] = tail[2 * r + c / 8][c % 8];
  }
}

// Portable fallback with the same per-element order of operations, for CPUs without
// AVX2/FMA.
template <typename W>
void PanelScalar(int rows, const float* x, long k_dim, const W* panel, float* y,
                 long n_dim, long columns) {
  for (int r = 0; r < rows; ++r) {
    for (long c = 0; c < columns; ++c) {
      float acc = 0.0f;
      for (long k = 0; k < k_dim; ++k) {
        acc = __builtin_fmaf(x[r * k_dim + k], Widen(panel[k * kPanel + c]), acc);
      }
      y[r * n_dim + c] = acc;
    }
  }
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
const bool kHasAvx512 = kHasAvx2 && __builtin_cpu_supports("avx512f");

// The products' instruction set: 0 portable, 1 AVX2 + FMA, 2 AVX-512. The best the CPU has
// unless lowered by tfspec_set_instruction_set (the tests compare all three bit for bit).
enum Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
int BestIsa() { return kHasAvx512 ? kAvx512 : kHasAvx2 ? kAvx2 : kScalar; }
std::atomic<int> g_isa{BestIsa()};

// The most rows of one PanelsAvx512 pass over np panels: np x rows accumulators + np
// weights + 1 broadcast within the 32 registers, and at most kMaxRows512.
constexpr int MaxRows512(int np) { return np >= 4 ? 6 : kMaxRows512; }

// Calls fn(std::integral_constant<int, R>()) with R == rows, 1 <= rows <= MaxR: a row count
// known only at run time selects the kernel compiled for it, whose R x NP accumulators are
// then named registers.
template <int MaxR, int R = 1, typename Fn>
void WithRows(int rows, const Fn& fn) {
  if constexpr (R < MaxR) {
    if (rows > R) {
      WithRows<MaxR, R + 1>(rows, fn);
      return;
    }
  }
  fn(std::integral_constant<int, R>());
}

// PanelsAvx512<rows, NP> for a rows known only at run time, 1 <= rows <= MaxRows512(NP).
template <int NP, typename W>
void PanelsAvx512Rows(int rows, const float* x, long k_dim, const W* panel, float* y,
                      long n_dim, long columns) {
  WithRows<MaxRows512(NP)>(rows, [&](auto r) {
    PanelsAvx512<decltype(r)::value, NP, W>(x, k_dim, panel, y, n_dim, columns);
  });
}

// Panels [p_begin, p_end) of one register block of `rows` rows on AVX-512, four panels at a
// time for up to 6 rows and two for up to 12 (NP x rows accumulators + NP weights + 1
// broadcast <= 32 registers), then one at a time. Measured with `bench.rows_matmul`'s whole
// decode windows (kernel on, one panel against four, interleaved): t5-base shapes 7-11%
// faster at 1 and 5 rows, the embedded target 13%. One panel at a time a 1-row product is
// one FMA chain per thread, waiting 4 cycles per k, and one weight stream in flight.
template <typename W>
void PanelsAvx512Block(int rows, const float* x, long k_dim, const W* w_panels, float* y,
                       long n_dim, long p_begin, long p_end) {
  auto columns_of = [&](long p) {  // columns of panel p (the last one may be partial)
    return n_dim - p * kPanel < kPanel ? n_dim - p * kPanel : kPanel;
  };
  long p = p_begin;
  if (rows <= MaxRows512(4)) {
    for (; p + 4 <= p_end; p += 4) {
      PanelsAvx512Rows<4, W>(rows, x, k_dim, w_panels + p * k_dim * kPanel, y + p * kPanel,
                             n_dim, columns_of(p + 3));
    }
  }
  for (; p + 2 <= p_end; p += 2) {
    PanelsAvx512Rows<2, W>(rows, x, k_dim, w_panels + p * k_dim * kPanel, y + p * kPanel,
                           n_dim, columns_of(p + 1));
  }
  for (; p < p_end; ++p) {
    PanelsAvx512Rows<1, W>(rows, x, k_dim, w_panels + p * k_dim * kPanel, y + p * kPanel,
                           n_dim, columns_of(p));
  }
}

// Panels [p_begin, p_end) for every row of x, one register block of rows at a time.
template <typename W>
void Panels(const float* x, const W* w_panels, float* y, const Dims& d, long p_begin,
            long p_end) {
  const int isa = g_isa.load(std::memory_order_relaxed);
  const int block = isa == kAvx512 ? kMaxRows512 : kMaxRows;
  for (long r0 = 0; r0 < d.m; r0 += block) {
    const int rows = static_cast<int>(d.m - r0 < block ? d.m - r0 : block);
    const float* xr = x + r0 * d.k;
    if (isa == kAvx512) {
      PanelsAvx512Block(rows, xr, d.k, w_panels, y + r0 * d.n, d.n, p_begin, p_end);
      continue;
    }
    for (long p = p_begin; p < p_end; ++p) {
      const W* panel = w_panels + p * d.k * kPanel;
      float* yp = y + r0 * d.n + p * kPanel;
      const long columns = d.n - p * kPanel < kPanel ? d.n - p * kPanel : kPanel;
      if (isa == kScalar) {
        PanelScalar(rows, xr, d.k, panel, yp, d.n, columns);
        continue;
      }
      switch (rows) {
        case 1: PanelAvx2<1, W>(xr, d.k, panel, yp, d.n, columns); break;
        case 2: PanelAvx2<2, W>(xr, d.k, panel, yp, d.n, columns); break;
        case 3: PanelAvx2<3, W>(xr, d.k, panel, yp, d.n, columns); break;
        case 4: PanelAvx2<4, W>(xr, d.k, panel, yp, d.n, columns); break;
        case 5: PanelAvx2<5, W>(xr, d.k, panel, yp, d.n, columns); break;
        default: PanelAvx2<6, W>(xr, d.k, panel, yp, d.n, columns); break;
      }
    }
  }
}

// Persistent helper threads that join a call's work if they wake in time. A job is split
// into chunks handed out by one shared counter: the caller starts on them at once and the
// helpers, woken at the same time, take whatever is left when they arrive. The caller waits
// only for chunks a helper has already taken, never for a helper to wake up: on a busy
// machine (two test workers, Beam threads, the sandbox) a sleeping helper may not run for a
// whole scheduler slice, and a static split that waited for its share made whole decode
// steps slower than XLA's own product. After a job a helper polls for the next one for
// g_spin_micros (yielding its core to any other runnable thread), then sleeps, so that it
// does not hold a core between decode calls. Concurrent calls (two XLA
// executions at once) do not share the pool: a caller that finds it busy does all the work
// itself.
// How long a helper keeps polling for the next job before it sleeps (microseconds).
std::atomic<long> g_spin_micros{300};

class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool();  // Never destroyed: helpers live as long as the process.
    return *pool;
  }

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs fn(chunk) once for every chunk in [0, chunks), on this thread and on any helper
  // that wakes before the chunks run out. False (nothing run) if the pool is busy.
  template <typename Fn>
  bool TryRun(long chunks, const Fn& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    // No helper is inside a job here (the last caller waited for active_ == 0), so the job's
    // fields can be rewritten; the generation store below publishes them.
    job_ = [&fn](long chunk) { fn(chunk); };
    chunks_ = chunks;
    next_.store(0, std::memory_order_relaxed);
    const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation_.store(generation, std::memory_order_seq_cst);
    }
    cv_.notify_all();
    Work();
    // Close the job, then wait for helpers inside it. A helper announces itself (active_)
    // before it checks closed_; with both sequentially consistent, either it sees the job
    // closed and leaves, or this thread sees it active and waits for its chunks.
    closed_.store(generation, std::memory_order_seq_cst);
    while (active_.load(std::memory_order_seq_cst) != 0) _mm_pause();
    return true;
  }

 private:
  Pool() {
    unsigned hw = std::thread::hardware_concurrency();
    int helpers = hw >= 2 ? static_cast<int>(hw < 8 ? hw : 8) - 1 : 0;
    for (int i = 0; i < helpers; ++i) helpers_.emplace_back([this] { Loop(); });
    for (auto& t : helpers_) t.detach();
  }

  void Work() {
    for (long chunk = next_.fetch_add(1, std::memory_order_relaxed); chunk < chunks_;
         chunk = next_.fetch_add(1, std::memory_order_relaxed)) {
      job_(chunk);
    }
  }

  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      // Stay awake for a moment after a job (yielding the core to anything runnable): the
      // products of a decode step come microseconds apart, and a helper that must be woken
      // for each one joins late or not at all (bench.rows_matmul, end to end: helper_spin_us).
      const auto spin_until = std::chrono::steady_clock::now() +
                              std::chrono::microseconds(g_spin_micros.load(std::memory_order_relaxed));
      while (generation_.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < spin_until) {
        std::this_thread::yield();
      }
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      active_.fetch_add(1, std::memory_order_seq_cst);
      // The newest job, if still open, is the one whose fields are set: its caller cannot
      // return (and start another) until active_ drops back.
      seen = generation_.load(std::memory_order_seq_cst);
      if (closed_.load(std::memory_order_seq_cst) != seen) Work();
      active_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  std::vector<std::thread> helpers_;
  std::mutex busy_, mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};  // the newest job's number
  std::atomic<uint64_t> closed_{0};      // the newest job whose chunks have all been taken
  std::atomic<int> active_{0};           // helpers between announcing and leaving a job
  std::atomic<long> next_{0};            // the next chunk to hand out
  long chunks_ = 0;
  std::function<void(long)> job_;
};

// Below this many multiply-adds one thread is faster than waking a helper (measured here:
// the handoff costs a few microseconds).
constexpr long kParallelWork = 1L << 17;
// Chunks per thread: enough that a helper arriving late still finds work, few enough that
// the counter is not contended.
constexpr long kChunksPerThread = 4;

// range_fn(begin, end) over [0, items): with `parallel` (work worth waking a helper for),
// in about kChunksPerThread consecutive ranges per thread handed out by the pool; else, or
// when the pool is busy, as one range on this thread.
template <typename Fn>
void SplitAcrossThreads(long items, bool parallel, const Fn& range_fn) {
  Pool& pool = Pool::Get();
  const int threads = pool.threads();
  if (parallel && threads > 1 && items >= 2) {
    long chunks = threads * kChunksPerThread;
    if (chunks > items) chunks = items;
    auto chunk = [&](long c) { range_fn(items * c / chunks, items * (c + 1) / chunks); };
    if (pool.TryRun(chunks, chunk)) return;
  }
  range_fn(0, items);
}

template <typename W>
void RowsMatmul(const float* x, const W* w_panels, float* y, const Dims& d) {
  const long panels = (d.n + kPanel - 1) / kPanel;
  SplitAcrossThreads(panels, d.m * d.k * d.n >= kParallelWork, [&](long begin, long end) {
    Panels(x, w_panels, y, d, begin, end);
  });
}

// The product for the first live[g] rows of every group g of `group` consecutive rows only
// (the live part of batch row g's window: 0 for a finished row); the other rows of y are
// set to zero. Computed rows are the same bits as in RowsMatmul (rows do not depend on their
// companions). Live rows are first gathered into one contiguous block (unless they already
// are one), so that a register block still reads each weight once for all of them.
template <typename W>
void LiveRowsMatmul(const float* x, const W* w_panels, float* y, const Dims& d, long group,
                    const int32_t* live) {
  const long groups = d.m / group;
  thread_local std::vector<long> counts;
  counts.resize(groups);
  long total = 0;
  bool contiguous = true;  // The live rows are rows 0 .. total - 1 (no group before is cut).
  for (long g = 0; g < groups; ++g) {
    const long count = live[g] < 0 ? 0 : live[g] > group ? group : live[g];
    counts[g] = count;
    if (count > 0 && total != g * group) contiguous = false;
    total += count;
  }
  Dims compact = d;
  compact.m = total;
  if (total > 0 && contiguous) {
    RowsMatmul(x, w_panels, y, compact);  // The live rows are y's first `total`.
  } else if (total > 0) {
    thread_local std::vector<float> cx, cy;
    cx.resize(total * d.k);
    cy.resize(total * d.n);
    for (long g = 0, r = 0; g < groups; r += counts[g], ++g) {
      std::memcpy(cx.data() + r * d.k, x + g * group * d.k, sizeof(float) * counts[g] * d.k);
    }
    RowsMatmul(cx.data(), w_panels, cy.data(), compact);
    for (long g = 0, r = 0; g < groups; r += counts[g], ++g) {
      std::memcpy(y + g * group * d.n, cy.data() + r * d.n, sizeof(float) * counts[g] * d.n);
    }
  }
  for (long g = 0; g < groups; ++g) {
    std::memset(y + (g * group + counts[g]) * d.n, 0,
                sizeof(float) * (group - counts[g]) * d.n);
  }
}

// "M,K,N" or "M,K,N,G": with G (rows per group, dividing M) a third operand, int32[M / G],
// holds how many leading rows of each group to compute (LiveRowsMatmul).
bool ParseGroup(const char* opaque, size_t len, long* group) {
  std::string s(opaque, len);
  long m, k, n;
  return sscanf(s.c_str(), "%ld,%ld,%ld,%ld", &m, &k, &n, group) == 4 && *group > 0 &&
         m % *group == 0;
}

template <typename W>
void Product(void* out, const void** in, const char* opaque, size_t opaque_len) {
  Dims d;
  if (!ParseDims(opaque, opaque_len, &d)) return;  // tfspec always passes valid dims.
  const float* x = static_cast<const float*>(in[0]);
  const W* w_panels = static_cast<const W*>(in[1]);
  // One result: XLA passes the result buffer itself (not a one-element tuple) here.
  float* y = static_cast<float*>(out);
  long group = 0;
  if (ParseGroup(opaque, opaque_len, &group)) {
    LiveRowsMatmul(x, w_panels, y, d, group, static_cast<const int32_t*>(in[2]));
  } else {
    RowsMatmul(x, w_panels, y, d);
  }
}

}  // namespace

extern "C" void tfspec_rows_matmul_f32(void* out, const void** in, const char* opaque,
                                       size_t opaque_len, XlaCustomCallStatus_* status) {
  (void)status;
  Product<float>(out, in, opaque, opaque_len);
}

// The same product from half-width panels (uint16 bit patterns of bfloat16 weights).
extern "C" void tfspec_rows_matmul_bf16w(void* out, const void** in, const char* opaque,
                                         size_t opaque_len, XlaCustomCallStatus_* status) {
  (void)status;
  Product<uint16_t>(out, in, opaque, opaque_len);
}

namespace {

// Batched few-row products of two activations, for decode attention:
//   out[g] = x[g] . y[g],  x [G, M, K], y [G, K, N] row-major, M small (the window)
// A decode step's attention is two such products per layer (scores = query . keys^T with
// the keys laid out [d_kv, L], and probs . values), one [M, K] x [K, N] per batch row and
// head. XLA:CPU emits them as one dot per call: a GEMV for one row, but for a 5-row verify
// a batched GEMM that cost ~4x the GEMV (t5-base, bench.loop_profile: 2.0 against 0.54 ms
// per round for the 48 attention dots), packing small operands for every head.
// Here every output element is the float32 FMA chain over k = 0 .. K-1 in order, as in the
// panel products, whatever M, the column block, the thread or the instruction set: a row's
// attention does not depend on its companions, and a 1-row step and a (k + 1)-row verify
// compute the same bits for the same row.
// Opaque: "G,M,K,N".
struct BatchDims {
  long g = 0, m = 0, k = 0, n = 0;
};

bool ParseBatchDims(const char* opaque, size_t len, BatchDims* d) {
  std::string s(opaque, len);
  return sscanf(s.c_str(), "%ld,%ld,%ld,%ld", &d->g, &d->m, &d->k, &d->n) == 4 &&
         d->g > 0 && d->m > 0 && d->k > 0 && d->n > 0;
}

// Columns per AVX-512 block: four 16-float registers per row (6 rows x 4 accumulators + 4
// operands + 1 broadcast within the 32 registers).
constexpr long kDenseBlock512 = 64;
constexpr int kDenseRows512 = 6;

// Rows [0, R) and columns [c0, c0 + cols) of one product (cols <= 64; masked past it, and a
// masked load reads nothing there, so y may end at the last column).
template <int R>
__attribute__((target("avx512f"))) void DenseAvx512(const float* x, long k_dim,
                                                   const float* y, long n_dim, float* out,
                                                   long c0, long cols) {
  constexpr int NP = 4;
  __mmask16 mask[NP];
  for (int p = 0; p < NP; ++p) {
    const long left = cols - p * 16;
    mask[p] = left >= 16 ? static_cast<__mmask16>(0xFFFF)
                         : left <= 0 ? static_cast<__mmask16>(0)
                                     : static_cast<__mmask16>((1u << left) - 1u);
  }
  __m512 acc[NP][R];
#pragma GCC unroll 4
  for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) acc[p][r] = _mm512_setzero_ps();
  }
  for (long k = 0; k < k_dim; ++k) {
    const float* row = y + k * n_dim + c0;
    __m512 w[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) w[p] = _mm512_maskz_loadu_ps(mask[p], row + p * 16);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * k_dim + k]);
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[p][r] = _mm512_fmadd_ps(xr, w[p], acc[p][r]);
    }
  }
#pragma GCC unroll 4
  for (int p = 0; p < NP; ++p) {
    if (mask[p] == 0) continue;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(out + r * n_dim + c0 + p * 16, mask[p], acc[p][r]);
    }
  }
}

// The AVX2 path: 16 columns (two 8-float registers) per block, up to 6 rows.
constexpr long kDenseBlock256 = 16;

template <int R>
__attribute__((target("avx2,fma"))) void DenseAvx2(const float* x, long k_dim,
                                                   const float* y, long n_dim, float* out,
                                                   long c0, long cols) {
  alignas(32) int32_t lanes[16];
  for (int i = 0; i < 16; ++i) lanes[i] = i < cols ? -1 : 0;
  const __m256i m0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
  const __m256i m1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes + 8));
  __m256 a[R], b[R];
  for (int r = 0; r < R; ++r) a[r] = b[r] = _mm256_setzero_ps();
  for (long k = 0; k < k_dim; ++k) {
    const float* row = y + k * n_dim + c0;
    const __m256 w0 = _mm256_maskload_ps(row, m0);
    const __m256 w1 = _mm256_maskload_ps(row + 8, m1);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_broadcast_ss(x + r * k_dim + k);
      a[r] = _mm256_fmadd_ps(xb, w0, a[r]);
      b[r] = _mm256_fmadd_ps(xb, w1, b[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_maskstore_ps(out + r * n_dim + c0, m0, a[r]);
    _mm256_maskstore_ps(out + r * n_dim + c0 + 8, m1, b[r]);
  }
}

// One product's columns [c_begin, c_end) for all of its rows.
void DenseColumns(const float* x, const float* y, float* out, long m, long k_dim, long n_dim,
                  long c_begin, long c_end) {
  const int isa = g_isa.load(std::memory_order_relaxed);
  const long block = isa == kAvx512 ? kDenseBlock512 : kDenseBlock256;
  const int max_rows = isa == kAvx512 ? kDenseRows512 : kMaxRows;
  for (long r0 = 0; r0 < m; r0 += max_rows) {
    const int rows = static_cast<int>(m - r0 < max_rows ? m - r0 : max_rows);
    const float* xr = x + r0 * k_dim;
    float* outr = out + r0 * n_dim;
    if (isa == kScalar) {
      for (int r = 0; r < rows; ++r) {
        for (long c = c_begin; c < c_end; ++c) {
          float acc = 0.0f;
          for (long k = 0; k < k_dim; ++k) {
            acc = __builtin_fmaf(xr[r * k_dim + k], y[k * n_dim + c], acc);
          }
          outr[r * n_dim + c] = acc;
        }
      }
      continue;
    }
    for (long c0 = c_begin; c0 < c_end; c0 += block) {
      const long cols = c_end - c0 < block ? c_end - c0 : block;
      if (isa == kAvx512) {
        WithRows<kDenseRows512>(rows, [&](auto r) {
          DenseAvx512<decltype(r)::value>(xr, k_dim, y, n_dim, outr, c0, cols);
        });
      } else {
        WithRows<kMaxRows>(rows, [&](auto r) {
          DenseAvx2<decltype(r)::value>(xr, k_dim, y, n_dim, outr, c0, cols);
        });
      }
    }
  }
}

void BatchedMatmul(const float* x, const float* y, float* out, const BatchDims& d) {
  const int isa = g_isa.load(std::memory_order_relaxed);
  const long block = isa == kAvx512 ? kDenseBlock512 : kDenseBlock256;
  const long blocks = (d.n + block - 1) / block;  // column blocks per product
  const long jobs = d.g * blocks;
  auto job = [&](long j) {
    const long g = j / blocks, c_begin = (j % blocks) * block;
    const long c_end = c_begin + block < d.n ? c_begin + block : d.n;
    DenseColumns(x + g * d.m * d.k, y + g * d.k * d.n, out + g * d.m * d.n, d.m, d.k, d.n,
                 c_begin, c_end);
  };
  // Jobs are consecutive in g and column block, handed out as the panel products' panels.
  SplitAcrossThreads(jobs, d.g * d.m * d.k * d.n >= kParallelWork, [&](long begin, long end) {
    for (long j = begin; j < end; ++j) job(j);
  });
}

}  // namespace

// x float32 [G, M, K] . y float32 [G, K, N] -> float32 [G, M, N] (opaque "G,M,K,N").
extern "C" void tfspec_batched_matmul_f32(void* out, const void** in, const char* opaque,
                                          size_t opaque_len, XlaCustomCallStatus_* status) {
  (void)status;
  BatchDims d;
  if (!ParseBatchDims(opaque, opaque_len, &d)) return;  // tfspec always passes valid dims.
  BatchedMatmul(static_cast<const float*>(in[0]), static_cast<const float*>(in[1]),
                static_cast<float*>(out), d);
}

namespace {

// Two 32-bit sums of per-element bijections: element i contributes bits * c_i with an odd
// (hence invertible mod 2^32) multiplier c_i that depends on i, so changing any one element
// changes both sums; several changes cancel in both with probability ~2^-64. Sums commute,
// so the result does not depend on how the elements are split among threads. (A plain
// loop: GCC vectorizes it; one pass is memory-bound.)
#define TFSPEC_HASH_BODY                                             \
  uint32_t a = 0, b = 0;                                             \
  for (long i = begin; i < end; ++i) {                               \
    const uint32_t odd = 2u * static_cast<uint32_t>(i) + 1u;         \
    a += bits[i] * (odd * 0x9E3779B9u);                              \
    b += (bits[i] ^ 0x5BD1E995u) * (odd * 0x85EBCA6Bu);              \
  }                                                                  \
  *h0 = a;                                                           \
  *h1 = b;

// The loop for any x86-64 (and the AVX-512 loop's last < 32 elements).
void HashRangePortable(const uint32_t* bits, long begin, long end, uint32_t* h0,
                       uint32_t* h1) {
  TFSPEC_HASH_BODY
}

// The same loop compiled for AVX2 (vpmulld; baseline x86-64 has no 32-bit vector multiply).
__attribute__((target("avx2"))) void HashRangeAvx2(const uint32_t* bits, long begin, long end,
                                                   uint32_t* h0, uint32_t* h1) {
  TFSPEC_HASH_BODY
}

// And for AVX-512, written out: the loop above multiplies four times per element (two
// multipliers, two products), and vpmulld is the slow instruction here, so a plain
// vectorized loop hashed the embedded target's 91 MB at 22 GB/s on one core where a plain
// sum streams 35. Here the multipliers advance by addition (c_{i+32} = c_i + 64 * C, as
// odd_i grows by 2 per element), two products per element remain, and two accumulator
// pairs hide their latency: 30 GB/s (a standalone benchmark of the four loops). The sums
// are the same as the loop's, bit for bit.
__attribute__((target("avx512f"))) void HashRangeAvx512(const uint32_t* bits, long begin,
                                                       long end, uint32_t* h0, uint32_t* h1) {
  constexpr uint32_t kA = 0x9E3779B9u, kB = 0x85EBCA6Bu, kX = 0x5BD1E995u;
  long i = begin;
  const __m512i lane2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                          28, 30);
  // odd_j = 2 j + 1 for the 16 elements j = i .. i + 15 (uint32 arithmetic, as the loop).
  const __m512i odd = _mm512_add_epi32(
      _mm512_set1_epi32(static_cast<int>(2u * static_cast<uint32_t>(i) + 1u)), lane2);
  __m512i ma0 = _mm512_mullo_epi32(odd, _mm512_set1_epi32(static_cast<int>(kA)));
  __m512i mb0 = _mm512_mullo_epi32(odd, _mm512_set1_epi32(static_cast<int>(kB)));
  __m512i ma1 = _mm512_add_epi32(ma0, _mm512_set1_epi32(static_cast<int>(32u * kA)));
  __m512i mb1 = _mm512_add_epi32(mb0, _mm512_set1_epi32(static_cast<int>(32u * kB)));
  const __m512i step_a = _mm512_set1_epi32(static_cast<int>(64u * kA));
  const __m512i step_b = _mm512_set1_epi32(static_cast<int>(64u * kB));
  const __m512i x = _mm512_set1_epi32(static_cast<int>(kX));
  __m512i a0 = _mm512_setzero_si512(), b0 = a0, a1 = a0, b1 = a0;
  for (; i + 32 <= end; i += 32) {
    const __m512i v0 = _mm512_loadu_si512(bits + i);
    const __m512i v1 = _mm512_loadu_si512(bits + i + 16);
    a0 = _mm512_add_epi32(a0, _mm512_mullo_epi32(v0, ma0));
    b0 = _mm512_add_epi32(b0, _mm512_mullo_epi32(_mm512_xor_si512(v0, x), mb0));
    a1 = _mm512_add_epi32(a1, _mm512_mullo_epi32(v1, ma1));
    b1 = _mm512_add_epi32(b1, _mm512_mullo_epi32(_mm512_xor_si512(v1, x), mb1));
    ma0 = _mm512_add_epi32(ma0, step_a);
    mb0 = _mm512_add_epi32(mb0, step_b);
    ma1 = _mm512_add_epi32(ma1, step_a);
    mb1 = _mm512_add_epi32(mb1, step_b);
  }
  uint32_t a = static_cast<uint32_t>(_mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1)));
  uint32_t b = static_cast<uint32_t>(_mm512_reduce_add_epi32(_mm512_add_epi32(b0, b1)));
  uint32_t tail_a, tail_b;  // The last < 32 elements (indices i .. end - 1, as the loop).
  HashRangePortable(bits, i, end, &tail_a, &tail_b);
  *h0 = a + tail_a;
  *h1 = b + tail_b;
}

void HashRange(const uint32_t* bits, long begin, long end, uint32_t* h0, uint32_t* h1) {
  const int isa = g_isa.load(std::memory_order_relaxed);
  if (isa == kAvx512) {
    HashRangeAvx512(bits, begin, end, h0, h1);
    return;
  }
  if (isa == kAvx2) {
    HashRangeAvx2(bits, begin, end, h0, h1);
    return;
  }
  HashRangePortable(bits, begin, end, h0, h1);
}
#undef TFSPEC_HASH_BODY


}  // namespace

// Fingerprints of float32 buffers (opaque: their element counts, comma-separated; one
// operand each): int32[n, 2].
//
// One job for all buffers: their elements laid end to end are cut into equal chunks (a
// chunk may span several buffers), and each chunk adds its pieces' sums to per-(chunk,
// buffer) partials. (A job per buffer woke the pool once per variable, 98 times for the
// embedded target, and left the small ones on one thread.) With the AVX-512 loop above,
// the embedded target's 91 MB hash in 2.1 ms from cache, as fast as XLA's reduce_sum over
// them, against 3.75 ms before. Inside a decode program the weights come from DRAM
// (5.4 ms, reduce_sum 4.8 ms, after a 400 MB sweep): there memory is the limit.
extern "C" void tfspec_fingerprint_f32(void* out, const void** in, const char* opaque,
                                       size_t opaque_len, XlaCustomCallStatus_* status) {
  (void)status;
  std::vector<long> counts;
  std::string s(opaque, opaque_len);
  for (size_t start = 0; start < s.size();) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    counts.push_back(std::stol(s.substr(start, comma - start)));
    start = comma + 1;
  }
  const long buffers = static_cast<long>(counts.size());
  std::vector<long> first(buffers + 1, 0);  // buffer b's elements: [first[b], first[b + 1])
  for (long b = 0; b < buffers; ++b) first[b + 1] = first[b] + counts[b];
  const long total = first[buffers];
  Pool& pool = Pool::Get();
  const int threads = pool.threads();
  const long chunks = threads > 1 && total >= kParallelWork ? threads * kChunksPerThread : 1;
  std::vector<uint32_t> partial(2 * chunks * buffers, 0);
  auto chunk = [&](long c) {
    const long begin = total * c / chunks, end = total * (c + 1) / chunks;
    // The first buffer that ends after `begin`.
    long b = static_cast<long>(std::upper_bound(first.begin(), first.end(), begin) -
                               first.begin()) - 1;
    for (; b < buffers && first[b] < end; ++b) {
      const long lo = std::max(begin, first[b]) - first[b];
      const long hi = std::min(end, first[b + 1]) - first[b];
      if (lo >= hi) continue;  // An empty buffer.
      uint32_t* p = &partial[2 * (c * buffers + b)];
      HashRange(static_cast<const uint32_t*>(in[b]), lo, hi, p, p + 1);
    }
  };
  if (!(chunks > 1 && pool.TryRun(chunks, chunk))) {
    for (long c = 0; c < chunks; ++c) chunk(c);
  }
  uint32_t* result = static_cast<uint32_t*>(out);
  for (long b = 0; b < buffers; ++b) {
    uint32_t h0 = 0, h1 = 0;
    for (long c = 0; c < chunks; ++c) {
      h0 += partial[2 * (c * buffers + b)];
      h1 += partial[2 * (c * buffers + b) + 1];
    }
    result[2 * b] = h0;
    result[2 * b + 1] = h1;
  }
}

namespace {

// ---------------------------------------------------------------------------------------
// Many-row products on AMX (the encoders: batch x prompt-bucket rows, compute-bound).
//
//   y[M, N] = x[M, K] . w[K, N]      x float32, w bfloat16-exact (stored as bfloat16)
//
// XLA:CPU runs an encoder's [384, 384] x [384, 1024] product at ~130-200 GFLOP/s here;
// AMX's tile product (TDPBF16PS) multiplies bfloat16 tiles at several times that. x is not
// bfloat16, so it is split exactly into three bfloat16 parts, x = hi + mid + lo (each the
// round-to-nearest of what the previous parts leave: 8 + 8 + 8 significant bits hold all
// 24 of a float32 for normal numbers), and y = hi.w + mid.w + lo.w. Each product of two
// bfloat16 values is exact in float32, so y is the float32 dot product in another
// summation order (AMX adds the two products of a bfloat16 pair, then the pair to the
// accumulator, rounding each sum to float32), not a bfloat16 approximation of it.
//
// Exactness across calls: every y[m, n] is the same sequence of float32 additions whatever
// M, the row block, the column block or the thread (k-blocks of 32 in order; within one,
// the hi, mid, lo parts in order), so a row never depends on its companions. It is not the
// sequence of the few-row kernel or of XLA's dot, so a model uses one or the other for a
// given product in every program (the encoders: this one wherever AMX runs).
//
// Weight layout ("AMX panels", bfloat16 [P, Kp / 2, 16, 2], P = ceil(N / 16), Kp = K
// rounded up to 32): panel p holds columns 16p .. 16p + 15, rows k of a pair (2i, 2i + 1)
// side by side (AMX's "VNNI" layout for B tiles), zero past K and N; one B tile (16 pairs
// x 16 columns) is 1 KB contiguous.

constexpr long kAmxRows = 16;   // rows of a tile
constexpr long kAmxDepth = 32;  // bfloat16 values per tile row (64 bytes): k per tile
constexpr long kAmxBlockRows = 32;  // rows per job: two row tiles share each B tile
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Whether this CPU has AMX-TILE and AMX-BF16 and the kernel let this process use them
// (Linux grants the 8 KB tile state per process on request).
bool DetectAmx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool bf16 = (d >> 22) & 1u, tile = (d >> 24) & 1u;
  if (!(bf16 && tile && kHasAvx512)) return false;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

const bool kHasAmx = DetectAmx();

// Round-to-nearest-even float32 -> bfloat16 bits of 16 lanes, (bits + 0x7FFF + lsb) >> 16
// (finite inputs). Integer arithmetic, not VCVTNEPS2BF16, which flushes denormals to zero.
__attribute__((target("avx512f"))) inline __m512i RoundToBf16x16(__m512i bits) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)),
                                            lsb), 16);
}

// rows x K float32 -> three bfloat16 parts at parts[p * kAmxBlockRows * kp + r * kp + k]
// (zero past K, and past `rows` within the row tiles AmxBlock loads): hi, mid, lo with
// x = hi + mid + lo: hi rounds x, mid rounds x - hi, lo rounds x - hi - mid (float32
// subtractions, exact here), 16 lanes at a time.
__attribute__((target("avx512f"))) void SplitRows(const float* x, long rows, long k_dim,
                                                 long kp, uint16_t* parts) {
  const long part_stride = kAmxBlockRows * kp;
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * k_dim;
    uint16_t* hi = parts + r * kp;
    uint16_t* mid = hi + part_stride;
    uint16_t* lo = mid + part_stride;
    for (long k = 0; k < kp; k += 16) {
      const long left = k_dim - k;
      const __mmask16 valid = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1;
      const __m512 v = _mm512_maskz_loadu_ps(valid, xr + k);
      const __m512i h = RoundToBf16x16(_mm512_castps_si512(v));
      const __m512 rest = _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
      const __m512i m = RoundToBf16x16(_mm512_castps_si512(rest));
      const __m512 last = _mm512_sub_ps(rest, _mm512_castsi512_ps(_mm512_slli_epi32(m, 16)));
      const __m512i l = RoundToBf16x16(_mm512_castps_si512(last));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + k), _mm512_cvtepi32_epi16(h));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(mid + k), _mm512_cvtepi32_epi16(m));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + k), _mm512_cvtepi32_epi16(l));
    }
  }
  // Rows past `rows` in a row tile that is loaded: zero (their products are dropped, but
  // stale bits could be anything).
  const long tile_rows = rows > kAmxRows ? kAmxBlockRows : kAmxRows;
  for (long p = 0; p < 3; ++p) {
    for (long r = rows; r < tile_rows; ++r) {
      std::memset(parts + p * part_stride + r * kp, 0, sizeof(uint16_t) * kp);
    }
  }
}

// Column tiles [t_begin, t_end) of one block of up to 32 rows (parts from SplitRows).
// Tiles: 0-3 accumulators (rows 0-15 / 16-31 x column tile t / t + 1), 4-5 x parts,
// 6-7 weights.
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void AmxBlock(
    const uint16_t* parts, long rows, long kp, const uint16_t* w_panels, float* y, long n_dim,
    long t_begin, long t_end) {
  TileConfig config;
  std::memset(&config, 0, sizeof(config));
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kAmxRows;
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
  const long k_blocks = kp / kAmxDepth;
  const long panel_stride = (kp / 2) * 32;  // bfloat16 values per panel
  const long part_stride = kAmxBlockRows * kp;
  const bool lower = rows > kAmxRows;  // a second row tile
  alignas(64) float spill[kAmxRows * kAmxRows];
  for (long t = t_begin; t < t_end; t += 2) {
    const bool pair = t + 1 < t_end;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long kb = 0; kb < k_blocks; ++kb) {
      const uint16_t* b0 = w_panels + t * panel_stride + kb * kAmxRows * 32;
      _tile_loadd(6, b0, 64);
      if (pair) _tile_loadd(7, b0 + panel_stride, 64);
      for (long p = 0; p < 3; ++p) {
        const uint16_t* a = parts + p * part_stride + kb * kAmxDepth;
        _tile_loadd(4, a, kp * 2);
        _tile_dpbf16ps(0, 4, 6);
        if (pair) _tile_dpbf16ps(1, 4, 7);
        if (lower) {
          _tile_loadd(5, a + kAmxRows * kp, kp * 2);
          _tile_dpbf16ps(2, 5, 6);
          if (pair) _tile_dpbf16ps(3, 5, 7);
        }
      }
    }
    // Stores: straight into y where the tile is whole, else through `spill`.
    for (int rt = 0; rt < (lower ? 2 : 1); ++rt) {
      const long r0 = rt * kAmxRows;
      const long valid_rows = rows - r0 < kAmxRows ? rows - r0 : kAmxRows;
      for (int ct = 0; ct < (pair ? 2 : 1); ++ct) {
        const long c0 = (t + ct) * kAmxRows;
        const long valid_cols = n_dim - c0 < kAmxRows ? n_dim - c0 : kAmxRows;
        float* dst = y + r0 * n_dim + c0;
        const bool whole = valid_rows == kAmxRows && valid_cols == kAmxRows;
        float* target = whole ? dst : spill;
        const long stride = whole ? n_dim * 4 : kAmxRows * 4;
        // Tile numbers are immediates: one store per accumulator.
        if (rt == 0 && ct == 0) _tile_stored(0, target, stride);
        if (rt == 0 && ct == 1) _tile_stored(1, target, stride);
        if (rt == 1 && ct == 0) _tile_stored(2, target, stride);
        if (rt == 1 && ct == 1) _tile_stored(3, target, stride);
        if (!whole) {
          for (long r = 0; r < valid_rows; ++r) {
            std::memcpy(dst + r * n_dim, spill + r * kAmxRows, sizeof(float) * valid_cols);
          }
        }
      }
    }
  }
  _tile_release();
}

// With `lengths`, row r is position r % width of prompt r / width, valid below that
// prompt's length (padding is written as 0); without, every row is valid.
inline bool RowValid(long r, const int32_t* lengths, long width) {
  return lengths == nullptr || r % width < static_cast<long>(lengths[r / width]);
}

// The rows of block [r0, r0 + rows) up to its last valid one.
long LiveBlockRows(long r0, long rows, const int32_t* lengths, long width) {
  for (long r = r0 + rows - 1; r >= r0; --r) {
    if (RowValid(r, lengths, width)) return r - r0 + 1;
  }
  return 0;
}

void AmxMatmul(const float* x, const uint16_t* w_panels, float* y, const Dims& d,
               const int32_t* lengths = nullptr, long width = 0) {
  const long kp = (d.k + kAmxDepth - 1) / kAmxDepth * kAmxDepth;
  const long tiles = (d.n + kAmxRows - 1) / kAmxRows;
  const long blocks = (d.m + kAmxBlockRows - 1) / kAmxBlockRows;
  Pool& pool = Pool::Get();
  const int threads = pool.threads();
  // Jobs: row blocks, each split into column groups (pairs of tiles) when there are too few
  // blocks to share evenly among the threads (a 24-token prompt is one block): the fewest
  // groups that make the jobs a multiple of the threads. Every group splits its block's
  // rows again, so more groups (for a helper that joins late) cost more than they balance:
  // a 24-row product took twice as long in 8 groups as in 2.
  long groups = 1;
  if (threads > 1 && blocks < 4L * threads) {
    groups = threads / std::gcd(blocks, static_cast<long>(threads));
    const long pairs = (tiles + 1) / 2;
    if (groups > pairs) groups = pairs;
  }
  auto job = [&](long j) {
    const long block = j / groups, group = j % groups;
    const long pairs = (tiles + 1) / 2;
    const long t_begin = 2 * (pairs * group / groups);
    long t_end = 2 * (pairs * (group + 1) / groups);
    if (t_end > tiles) t_end = tiles;
    if (t_begin >= t_end) return;
    const long r0 = block * kAmxBlockRows;
    const long rows = d.m - r0 < kAmxBlockRows ? d.m - r0 : kAmxBlockRows;
    // Padded rows at the end of the block (a prompt's padding) are not multiplied: a
    // block of padding is skipped, and one valid to row 16 or less uses one row tile.
    const long live = LiveBlockRows(r0, rows, lengths, width);
    if (live > 0) {
      thread_local std::vector<uint16_t> parts;
      parts.resize(3 * kAmxBlockRows * kp);
      SplitRows(x + r0 * d.k, live, d.k, kp, parts.data());
      AmxBlock(parts.data(), live, kp, w_panels, y + r0 * d.n, d.n, t_begin, t_end);
    }
    // Every padded row reads 0, also one computed before a block's last valid row.
    const long c_begin = t_begin * kAmxRows;
    const long c_end = t_end * kAmxRows < d.n ? t_end * kAmxRows : d.n;
    for (long r = r0; r < r0 + rows; ++r) {
      if (r < r0 + live && RowValid(r, lengths, width)) continue;
      std::memset(y + r * d.n + c_begin, 0, sizeof(float) * (c_end - c_begin));
    }
  };
  const long jobs = blocks * groups;
  if (threads > 1 && jobs > 1 && pool.TryRun(jobs, job)) return;
  for (long j = 0; j < jobs; ++j) job(j);
}

}  // namespace

// x float32 [M, K] . AMX panels of a bfloat16-exact [K, N] -> float32 [M, N] (opaque
// "M,K,N"). Only registered where AMX runs (tfspec_amx_available).
//
// Opaque "M,K,N,S" with a third operand, int32 lengths [M / S]: the rows are M / S prompts of
// S positions, and the rows past each prompt's length come out 0 (not multiplied where a
// whole row tile or block is padding).
extern "C" void tfspec_amx_matmul(void* out, const void** in, const char* opaque,
                                  size_t opaque_len, XlaCustomCallStatus_* status) {
  (void)status;
  Dims d;
  if (!ParseDims(opaque, opaque_len, &d)) return;
  long width = 0;
  {
    std::string s(opaque, opaque_len);
    long m, k, n;
    if (sscanf(s.c_str(), "%ld,%ld,%ld,%ld", &m, &k, &n, &width) != 4 || width <= 0 ||
        d.m % width != 0) {
      width = 0;
    }
  }
  AmxMatmul(static_cast<const float*>(in[0]), static_cast<const uint16_t*>(in[1]),
            static_cast<float*>(out), d,
            width > 0 ? static_cast<const int32_t*>(in[2]) : nullptr, width);
}

// 1 where this CPU has AMX-TILE and AMX-BF16 and the OS let this process use them, else 0.
extern "C" int tfspec_amx_available() { return kHasAmx ? 1 : 0; }

// ---------------------------------------------------------------------------------------
// Prompt attention: an encoder's self-attention over a batch of left-aligned prompts, one
// pass per batch row and head that never writes the [S, S] scores to memory.
//
//   out[b, i, h D + d] = sum_{j < L_b} p_ij v_j[d] / sum_{j < L_b} p_ij     (i < L_b)
//   p_ij = exp(s_ij - max_j s_ij),  s_ij = q_i . k_j + bias[h, j - i]
//   out[b, i, :] = 0                                                         (i >= L_b)
//
// Why: XLA runs this as a batched GEMM that writes the [B, H, S, S] scores, then
// separate passes for the bias and mask, the max, the exp, the sum and the value product:
// on the embedded target's 384-wide prompt bucket 12 of a request's ~35 ms. Here the scores
// of 8 query rows stay in L1, the work is split by (row, head) across the pool, and only
// the L_b valid keys and queries are computed (padding costs nothing: a 268-token prompt in
// the 384-wide bucket is 49% of the bucket's pairs).
//
// Exactness: every s_ij is the FMA chain over d = 0 .. D-1 in order, the max and the sum
// run over j in one fixed order that depends only on L_b, and exp is one polynomial, so a
// row's output depends on its own prompt alone: not on its companions, not on the bucket.
// It is float32 attention (exp within 2 ulp), not XLA's bit for bit; a compiled program
// uses one or the other for every call (the autoregressive and speculative loops of a
// request share its encoder).
//
// qkv float32 [B, S, 3, H, D] (q | k | v side by side, head-major, as the fused
// projection writes them), offset_bias float32 [H, 2S - 1] (the bias of key - query offset
// o at o + S - 1), lengths int32 [B]; out float32 [B, S, H, D]. Opaque "B,S,H,D". AVX-512
// only (tfspec_prompt_attention_available).

namespace {

struct AttentionDims {
  long b = 0, s = 0, h = 0, d = 0;
};

bool ParseAttentionDims(const char* opaque, size_t len, AttentionDims* a) {
  std::string s(opaque, len);
  return sscanf(s.c_str(), "%ld,%ld,%ld,%ld", &a->b, &a->s, &a->h, &a->d) == 4 &&
         a->b > 0 && a->s > 0 && a->h > 0 && a->d > 0;
}

constexpr int kQueryRows = 8;   // query rows whose scores are computed together
constexpr long kKeyChunk = 32;  // keys per score block: two 16-float registers
constexpr int kValueRows = 4;   // rows per value-product pass: 4 x 4 accumulators

// e^x for x <= 0 (scores minus their row's max): 2^n e^r with n = round(x / ln 2),
// |r| <= ln 2 / 2, e^r by its degree-7 Taylor polynomial (truncation < 1e-8 relative),
// and exactly 0 below -87 (where e^x is below float32's smallest normal).
__attribute__((target("avx512f"))) inline __m512 ExpNonPositive(__m512 x) {
  const __m512 floor_x = _mm512_set1_ps(-87.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, floor_x, _CMP_GE_OQ);
  x = _mm512_max_ps(x, floor_x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln 2, with ln 2 split in two (Cody and Waite) so n ln 2 loses no bits.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// Lanes of chunk [j0, j0 + 16) below `length` (keys of a row, or columns of a head).
inline __mmask16 KeyMask(long j0, long length) {
  const long valid = length - j0;
  return valid >= 16 ? static_cast<__mmask16>(0xFFFF)
                     : valid <= 0 ? static_cast<__mmask16>(0)
                                  : static_cast<__mmask16>((1u << valid) - 1u);
}

// Batch row b, head h (see above).
__attribute__((target("avx512f"))) void PromptAttentionHead(const float* qkv,
                                                           const float* offset_bias,
                                                           long length,
                                                           const AttentionDims& a, long b,
                                                           long h, float* out) {
  const long in_row = 3 * a.h * a.d;  // floats per position of qkv
  const long out_row = a.h * a.d;     // floats per position of out
  const float* q = qkv + b * a.s * in_row + h * a.d;
  const float* k = q + out_row;
  const float* v = k + out_row;
  float* o = out + b * a.s * out_row + h * a.d;
  for (long i = length; i < a.s; ++i) std::memset(o + i * out_row, 0, sizeof(float) * a.d);
  if (length <= 0) return;
  // Keys transposed, [D, Lp], zero past `length`: a score block reads 32 keys' d-th
  // components as two contiguous registers.
  const long lp = (length + kKeyChunk - 1) / kKeyChunk * kKeyChunk;
  thread_local std::vector<float> keys_t, weights, queries;
  keys_t.assign(a.d * lp, 0.0f);
  for (long j = 0; j < length; ++j) {
    for (long d = 0; d < a.d; ++d) keys_t[d * lp + j] = k[j * in_row + d];
  }
  weights.resize(kQueryRows * lp);
  queries.resize(kQueryRows * a.d);
  const float* bias = offset_bias + h * (2 * a.s - 1) + (a.s - 1);  // bias[o] for o = j - i
  const __m512 masked = _mm512_set1_ps(-3.0e38f);
  for (long i0 = 0; i0 < length; i0 += kQueryRows) {
    const int rows = length - i0 < kQueryRows ? static_cast<int>(length - i0) : kQueryRows;
    // The block's queries interleaved, [D, 8]: the broadcasts of one d read one line
    // from one base register (8 row pointers did not stay in registers).
    for (int r = 0; r < kQueryRows; ++r) {  // rows past `length` repeat the last (unused)
      const float* q_row = q + (i0 + r < length ? i0 + r : length - 1) * in_row;
      for (long d = 0; d < a.d; ++d) queries[d * kQueryRows + r] = q_row[d];
    }
    // Scores plus bias, masked past `length`, into weights[r, :].
    for (long j0 = 0; j0 < lp; j0 += kKeyChunk) {
      __m512 acc[kQueryRows][2];
#pragma GCC unroll 8
      for (int r = 0; r < kQueryRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      for (long d = 0; d < a.d; ++d) {
        const __m512 k0 = _mm512_loadu_ps(&keys_t[d * lp + j0]);
        const __m512 k1 = _mm512_loadu_ps(&keys_t[d * lp + j0 + 16]);
        const float* q_d = &queries[d * kQueryRows];
#pragma GCC unroll 8
        for (int r = 0; r < kQueryRows; ++r) {
          const __m512 qb = _mm512_set1_ps(q_d[r]);
          acc[r][0] = _mm512_fmadd_ps(qb, k0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(qb, k1, acc[r][1]);
        }
      }
      for (int r = 0; r < rows; ++r) {
        const float* bias_row = bias - (i0 + r);  // bias_row[j] = bias[j - i]
        for (int half = 0; half < 2; ++half) {
          const long j = j0 + 16 * half;
          const __mmask16 valid = KeyMask(j, length);
          // Masked lanes are not read: bias_row[j] exists only for j < S.
          const __m512 s = _mm512_add_ps(acc[r][half], _mm512_maskz_loadu_ps(valid, bias_row + j));
          _mm512_storeu_ps(&weights[r * lp + j], _mm512_mask_blend_ps(valid, masked, s));
        }
      }
    }
    // Softmax numerators in place, and their sums.
    float totals[kQueryRows];
    for (int r = 0; r < rows; ++r) {
      float* w = &weights[r * lp];
      __m512 peak = masked;
      for (long j = 0; j < lp; j += 16) peak = _mm512_max_ps(peak, _mm512_loadu_ps(w + j));
      const __m512 shift = _mm512_set1_ps(_mm512_reduce_max_ps(peak));
      __m512 sum = _mm512_setzero_ps();
      for (long j = 0; j < lp; j += 16) {
        const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(w + j), shift));
        _mm512_storeu_ps(w + j, e);
        sum = _mm512_add_ps(sum, e);
      }
      totals[r] = _mm512_reduce_add_ps(sum);
    }
    // out[i, c .. c + 16) = sum_j w[r, j] v_j[c .. c + 16) / total, 4 rows x 64 columns
    // (4 x 4 accumulators) per pass. No branch inside the j loop (a runtime chunk count
    // there kept the accumulators on the stack): absent chunks load 0 under a zero mask,
    // absent rows repeat the pass's first.
    for (int r0 = 0; r0 < rows; r0 += kValueRows) {
      const int value_rows = rows - r0 < kValueRows ? rows - r0 : kValueRows;
      const float* w_rows[kValueRows];
      for (int r = 0; r < kValueRows; ++r) w_rows[r] = &weights[(r0 + (r < value_rows ? r : 0)) * lp];
      for (long c0 = 0; c0 < a.d; c0 += 64) {
        __mmask16 masks[4];
        for (int c = 0; c < 4; ++c) masks[c] = KeyMask(c0 + 16 * c, a.d);
        const __mmask16 m0 = masks[0], m1 = masks[1], m2 = masks[2], m3 = masks[3];
        __m512 acc[kValueRows][4];
#pragma GCC unroll 4
        for (int r = 0; r < kValueRows; ++r) {
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
        }
        const float* vj = v + c0;
        for (long j = 0; j < length; ++j, vj += in_row) {
          const __m512 v0 = _mm512_maskz_loadu_ps(m0, vj);
          const __m512 v1 = _mm512_maskz_loadu_ps(m1, vj + 16);
          const __m512 v2 = _mm512_maskz_loadu_ps(m2, vj + 32);
          const __m512 v3 = _mm512_maskz_loadu_ps(m3, vj + 48);
#pragma GCC unroll 4
          for (int r = 0; r < kValueRows; ++r) {
            const __m512 wb = _mm512_set1_ps(w_rows[r][j]);
            acc[r][0] = _mm512_fmadd_ps(wb, v0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(wb, v1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(wb, v2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(wb, v3, acc[r][3]);
          }
        }
        for (int r = 0; r < value_rows; ++r) {
          const __m512 total = _mm512_set1_ps(totals[r0 + r]);
          float* dst = o + (i0 + r0 + r) * out_row + c0;
          for (int c = 0; c < 4; ++c) {
            _mm512_mask_storeu_ps(dst + 16 * c, masks[c], _mm512_div_ps(acc[r][c], total));
          }
        }
      }
    }
  }
}

void PromptAttention(const float* qkv, const float* offset_bias, const int32_t* lengths,
                     float* out, const AttentionDims& a) {
  auto job = [&](long j) {
    const long b = j / a.h, h = j % a.h;
    long length = lengths[b];
    length = length < 0 ? 0 : length > a.s ? a.s : length;
    PromptAttentionHead(qkv, offset_bias, length, a, b, h, out);
  };
  const long jobs = a.b * a.h;
  Pool& pool = Pool::Get();
  if (pool.threads() > 1 && jobs > 1 && pool.TryRun(jobs, job)) return;
  for (long j = 0; j < jobs; ++j) job(j);
}

}  // namespace

// See PromptAttention above (opaque "B,S,H,D"). Only registered with AVX-512.
extern "C" void tfspec_prompt_attention_f32(void* out, const void** in, const char* opaque,
                                            size_t opaque_len, XlaCustomCallStatus_* status) {
  (void)status;
  AttentionDims a;
  if (!ParseAttentionDims(opaque, opaque_len, &a)) return;
  PromptAttention(static_cast<const float*>(in[0]), static_cast<const float*>(in[1]),
                  static_cast<const int32_t*>(in[2]), static_cast<float*>(out), a);
}

// 1 where tfspec_prompt_attention_f32 can run (AVX-512), else 0.
extern "C" int tfspec_prompt_attention_available() { return kHasAvx512 ? 1 : 0; }

// Sets how long helpers poll for the next job before sleeping (0: sleep at once).
extern "C" void tfspec_set_helper_spin(long micros) {
  g_spin_micros.store(micros < 0 ? 0 : micros, std::memory_order_relaxed);
}

// Sets the products' instruction set (0 portable, 1 AVX2, 2 AVX-512), capped at what this
// CPU has; returns the one in effect. Results are the same bit for bit whichever it is.
extern "C" int tfspec_set_instruction_set(int isa) {
  const int best = BestIsa();
  const int chosen = isa < 0 ? 0 : isa > best ? best : isa;
  g_isa.store(chosen, std::memory_order_relaxed);
  return chosen;
}

extern "C" int tfspec_register_rows_matmul() {
  xla::CustomCallTargetRegistry::Global()->Register(
      "tfspec_rows_matmul_f32", reinterpret_cast<void*>(&tfspec_rows_matmul_f32), "Host");
  xla::CustomCallTargetRegistry::Global()->Register(
      "tfspec_rows_matmul_bf16w", reinterpret_cast<void*>(&tfspec_rows_matmul_bf16w), "Host");
  xla::CustomCallTargetRegistry::Global()->Register(
      "tfspec_amx_matmul", reinterpret_cast<void*>(&tfspec_amx_matmul), "Host");
  xla::CustomCallTargetRegistry::Global()->Register(
      "tfspec_batched_matmul_f32", reinterpret_cast<void*>(&tfspec_batched_matmul_f32),
      "Host");
  if (kHasAvx512) {
    xla::CustomCallTargetRegistry::Global()->Register(
        "tfspec_prompt_attention_f32", reinterpret_cast<void*>(&tfspec_prompt_attention_f32),
        "Host");
  }
  xla::CustomCallTargetRegistry::Global()->Register(
      "tfspec_fingerprint_f32", reinterpret_cast<void*>(&tfspec_fingerprint_f32), "Host");
  return 0;
}
