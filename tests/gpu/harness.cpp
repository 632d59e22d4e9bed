// GPU test harness implementation (see harness.h).
#include "harness.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/problem.h"

namespace normkit::gputest {

// ---------------------------------------------------------------------------------------------
// CUDA basics
// ---------------------------------------------------------------------------------------------

void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  std::ostringstream os;
  os << what << " failed: " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ") at " << file
     << ":" << line;
  throw std::runtime_error(os.str());
}

namespace {
cudaStream_t g_stream = nullptr;
bool caller_checked_pointers = false;  // set by CallerCheckedPointers
std::map<std::string, std::unique_ptr<Bundle>>& cache() {
  static std::map<std::string, std::unique_ptr<Bundle>> c;
  return c;
}
}  // namespace

cudaStream_t test_stream() {
  if (!g_stream) NK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  return g_stream;
}

void shutdown() {
  cache().clear();
  if (g_stream) {
    cudaStreamSynchronize(g_stream);
    cudaStreamDestroy(g_stream);
    g_stream = nullptr;
  }
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) NK_CUDA(cudaMalloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() { reset(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::reset() {
  if (ptr_) cudaFree(ptr_);  // implicit device synchronisation: no pending work still uses it
  ptr_ = nullptr;
  bytes_ = 0;
}
void DeviceBuffer::poison(cudaStream_t stream) {
  if (!ptr_) return;
  NK_CUDA(cudaMemsetAsync(ptr_, test::kPoisonByte, bytes_, stream));
  NK_CUDA(cudaStreamSynchronize(stream));
}
void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset, cudaStream_t stream) {
  if (bytes == 0) return;
  if (offset + bytes > bytes_) throw std::runtime_error("DeviceBuffer::upload out of range");
  NK_CUDA(cudaMemcpyAsync(bytes_ptr() + offset, host, bytes, cudaMemcpyHostToDevice, stream));
  NK_CUDA(cudaStreamSynchronize(stream));
}
void DeviceBuffer::upload(const HostBuffer& host, cudaStream_t stream) {
  upload(host.data(), host.bytes.size(), 0, stream);
}
void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset, cudaStream_t stream) const {
  if (bytes == 0) return;
  if (offset + bytes > bytes_) throw std::runtime_error("DeviceBuffer::download out of range");
  NK_CUDA(cudaMemcpyAsync(host, bytes_ptr() + offset, bytes, cudaMemcpyDeviceToHost, stream));
  NK_CUDA(cudaStreamSynchronize(stream));
}
HostBuffer DeviceBuffer::download(DType dtype, cudaStream_t stream) const {
  HostBuffer h(dtype, std::int64_t(bytes_ / dtype_size(dtype)));
  download(h.data(), h.bytes.size(), 0, stream);
  return h;
}

// ---------------------------------------------------------------------------------------------
// host parallelism
// ---------------------------------------------------------------------------------------------

int host_threads() {
  static const int n = std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
  return n;
}

void parallel_chunks(std::int64_t n, std::int64_t grain,
                     const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t chunks = chunk_count(n, grain);
  const int threads = int(std::min<std::int64_t>(host_threads(), chunks));
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (;;) {
      const std::int64_t c = next.fetch_add(1);
      if (c >= chunks) return;
      try {
        fn(c, c * grain, std::min(n, (c + 1) * grain));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(chunks);
        return;
      }
    }
  };
  if (threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(std::size_t(threads));
    for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
}

namespace {
/// Row chunk size for reference work: about 1M elements, at least 4 chunks per thread.
std::int64_t ref_grain(std::int64_t m, std::int64_t n) {
  const std::int64_t by_size = std::max<std::int64_t>(1, (std::int64_t(1) << 20) / std::max<std::int64_t>(n, 1));
  const std::int64_t by_threads = std::max<std::int64_t>(1, chunk_count(m, std::int64_t(host_threads()) * 4));
  return std::min(by_size, by_threads);
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// specs and host cases
// ---------------------------------------------------------------------------------------------

void PrintTo(const Spec& s, std::ostream* os) {
  *os << s.name << " {" << (s.rms ? "rms" : "layer_norm") << " M=" << s.M << " N=" << s.N << " "
      << dtype_name(s.dtype) << " w=" << dtype_name(s.weight_dtype()) << (s.has_weight ? "" : " no-weight")
      << (s.bias_present() ? "" : " no-bias") << " eps=" << s.eps << " pads=" << s.pad_x << "/" << s.pad_dy
      << "/" << s.pad_out << " offset=" << s.offset << "}";
}

Spec ln_spec(std::string name, std::int64_t M, std::int64_t N, DType dtype) {
  Spec s;
  s.name = std::move(name);
  s.rms = false;
  s.M = M;
  s.N = N;
  s.dtype = dtype;
  s.eps = 1e-5;
  return s;
}

Spec rms_spec(std::string name, std::int64_t M, std::int64_t N, DType dtype) {
  Spec s = ln_spec(std::move(name), M, N, dtype);
  s.rms = true;
  s.has_bias = false;
  s.eps = 1e-6;
  return s;
}

Problem problem_of(const Spec& spec, Op op) {
  Problem p;
  p.op = op;
  p.rows = spec.M;
  p.cols = spec.N;
  p.dtype = spec.dtype;
  p.weight_dtype = spec.weight_dtype();
  p.mask = spec.full_mask();
  p.rows_vector_aligned = true;
  return p;
}

std::uint64_t seed_of(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return splitmix64(h);
}

void fill_random(HostBuffer& b, const Layout& l, std::uint64_t seed, double center, double halfwidth) {
  // Chunks of whole rows of about 64K elements; each chunk has its own mt19937_64 so the values
  // do not depend on the number of threads.
  const std::int64_t grain = std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(l.cols, 1));
  parallel_chunks(l.rows, grain, [&](std::int64_t chunk, std::int64_t r0, std::int64_t r1) {
    std::mt19937_64 rng(splitmix64(seed ^ splitmix64(std::uint64_t(chunk) + 1)));
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t c = 0; c < l.cols; ++c) {
        // (k + 0.5) / 2^53 in (0, 1): uniform in center +- halfwidth, never exactly the ends.
        const double u = (double(rng() >> 11) + 0.5) * 0x1.0p-53;
        b.set(l.at(r, c), center + halfwidth * (2.0 * u - 1.0));
      }
  });
}

namespace {

HostBuffer make_matrix(DType t, const Layout& l) {
  HostBuffer b(t, l.elements());
  if (l.has_gaps() || l.rows == 0) test::poison(b);  // gaps read as NaN
  return b;
}

}  // namespace

/// mean/rstd in F32 from the CPU forward on the exact inputs (parallel over row chunks).
void compute_stats(HostCase& hc) {
  const Spec& s = hc.spec;
  const Layout lx = s.x_layout();
  const std::size_t e = dtype_size(s.dtype);
  hc.rstd = HostBuffer(DType::F32, s.M);
  hc.mean = s.rms ? HostBuffer() : HostBuffer(DType::F32, s.M);
  parallel_chunks(s.M, ref_grain(s.M, s.N), [&](std::int64_t, std::int64_t r0, std::int64_t r1) {
    const std::int64_t rows = r1 - r0;
    HostBuffer y(s.dtype, rows * s.N);
    const ConstRows x{static_cast<const unsigned char*>(hc.x.data()) + std::size_t(lx.at(r0, 0)) * e, s.dtype, rows,
                      s.N, lx.stride};
    std::optional<ConstVec> w, b;
    if (s.has_weight) w = ConstVec{hc.weight.data(), s.weight_dtype(), s.N};
    if (s.bias_present()) b = ConstVec{hc.bias.data(), s.weight_dtype(), s.N};
    const Rows yv{y.data(), s.dtype, rows, s.N, -1};
    const Vec rstd{static_cast<unsigned char*>(hc.rstd.data()) + r0 * 4, DType::F32, rows};
    if (s.rms) {
      RmsNormForwardArgs a;
      a.x = x;
      a.weight = w;
      a.eps = s.eps;
      a.y = yv;
      a.rstd = rstd;
      rms_norm_forward(a, ExecConfig{Device::Cpu});
    } else {
      LayerNormForwardArgs a;
      a.x = x;
      a.weight = w;
      a.bias = b;
      a.eps = s.eps;
      a.y = yv;
      a.mean = Vec{static_cast<unsigned char*>(hc.mean.data()) + r0 * 4, DType::F32, rows};
      a.rstd = rstd;
      layer_norm_forward(a, ExecConfig{Device::Cpu});
    }
  });
}

std::unique_ptr<HostCase> make_host_case(const Spec& spec, std::optional<std::uint64_t> seed) {
  auto hc = std::make_unique<HostCase>();
  hc->spec = spec;
  const std::uint64_t s0 = seed.value_or(seed_of(spec.name));
  hc->x = make_matrix(spec.dtype, spec.x_layout());
  hc->dy = make_matrix(spec.dtype, spec.dy_layout());
  fill_random(hc->x, spec.x_layout(), splitmix64(s0 ^ 1), 0.2, 1.7);
  fill_random(hc->dy, spec.dy_layout(), splitmix64(s0 ^ 2), 0.0, 1.7);
  const Layout vec{1, spec.N, spec.N, 0};
  if (spec.has_weight) {
    hc->weight = HostBuffer(spec.weight_dtype(), spec.N);
    fill_random(hc->weight, vec, splitmix64(s0 ^ 3), 1.0, 0.8);
  }
  if (spec.bias_present()) {
    hc->bias = HostBuffer(spec.weight_dtype(), spec.N);
    fill_random(hc->bias, vec, splitmix64(s0 ^ 4), 0.0, 0.8);
  }
  compute_stats(*hc);
  return hc;
}

DeviceCase upload_case(const HostCase& hc, cudaStream_t stream) {
  DeviceCase d;
  // each input at `prefix` bytes into its buffer, the buffer poisoned first
  auto up = [&](DeviceBuffer& dst, const HostBuffer& src, std::size_t prefix) {
    dst = DeviceBuffer(std::max<std::size_t>(prefix + src.bytes.size(), 16));
    dst.poison(stream);
    dst.upload(src.data(), src.bytes.size(), prefix, stream);
  };
  up(d.x, hc.x, 0);
  up(d.dy, hc.dy, 0);
  // weight and bias at spec.weight_offset elements
  const std::size_t weight_prefix = std::size_t(hc.spec.weight_offset) * dtype_size(hc.spec.weight_dtype());
  if (hc.spec.has_weight) up(d.weight, hc.weight, weight_prefix);
  if (hc.spec.bias_present()) up(d.bias, hc.bias, weight_prefix);
  if (!hc.spec.rms) up(d.mean, hc.mean, 0);
  up(d.rstd, hc.rstd, 0);
  return d;
}

// ---------------------------------------------------------------------------------------------
// float64 reference through the public CPU API
// ---------------------------------------------------------------------------------------------

namespace {
std::vector<double> rows_to_f64(const HostBuffer& b, const Layout& l, std::int64_t r0, std::int64_t r1) {
  std::vector<double> out(std::size_t((r1 - r0) * l.cols));
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = 0; c < l.cols; ++c) out[std::size_t((r - r0) * l.cols + c)] = b.get(l.at(r, c));
  return out;
}
}  // namespace

RefBackward reference_backward(const HostCase& hc, bool with_dx) {
  const Spec& s = hc.spec;
  const std::int64_t M = s.M, N = s.N;
  RefBackward ref;
  ref.dweight.assign(std::size_t(N), 0.0);
  ref.dbias.assign(std::size_t(N), 0.0);
  if (with_dx) ref.dx.assign(std::size_t(M * N), 0.0);
  if (M == 0) return ref;  // empty sums: zeros
  const std::vector<double> w = s.has_weight ? hc.weight.to_double() : std::vector<double>();
  const std::vector<double> mean = s.rms ? std::vector<double>() : hc.mean.to_double();
  const std::vector<double> rstd = hc.rstd.to_double();
  const std::int64_t grain = ref_grain(M, N);
  const std::int64_t chunks = chunk_count(M, grain);
  std::vector<double> part_dw(std::size_t(chunks * N)), part_db(std::size_t(chunks * N));
  parallel_chunks(M, grain, [&](std::int64_t chunk, std::int64_t r0, std::int64_t r1) {
    const std::int64_t rows = r1 - r0;
    const std::vector<double> x = rows_to_f64(hc.x, s.x_layout(), r0, r1);
    const std::vector<double> dy = rows_to_f64(hc.dy, s.dy_layout(), r0, r1);
    const ConstRows xv{x.data(), DType::F64, rows, N, -1}, dyv{dy.data(), DType::F64, rows, N, -1};
    const ConstVec rv{rstd.data() + r0, DType::F64, rows};
    std::optional<ConstVec> wv;
    if (s.has_weight) wv = ConstVec{w.data(), DType::F64, N};
    std::optional<Rows> dxv;
    if (with_dx) dxv = Rows{ref.dx.data() + r0 * N, DType::F64, rows, N, -1};
    const Vec dwv{part_dw.data() + chunk * N, DType::F64, N};
    if (s.rms) {
      RmsNormBackwardArgs a;
      a.dy = dyv;
      a.x = xv;
      a.rstd = rv;
      a.weight = wv;
      a.dx = dxv;
      a.dweight = dwv;
      rms_norm_backward(a, ExecConfig{Device::Cpu});  // RMSNorm has no dbias: ref.dbias stays zeros
    } else {
      LayerNormBackwardArgs a;
      a.dy = dyv;
      a.x = xv;
      a.mean = ConstVec{mean.data() + r0, DType::F64, rows};
      a.rstd = rv;
      a.weight = wv;
      a.dx = dxv;
      a.dweight = dwv;
      a.dbias = Vec{part_db.data() + chunk * N, DType::F64, N};
      layer_norm_backward(a, ExecConfig{Device::Cpu});
    }
  });
  for (std::int64_t k = 0; k < chunks; ++k)
    for (std::int64_t c = 0; c < N; ++c) {
      ref.dweight[std::size_t(c)] += part_dw[std::size_t(k * N + c)];
      ref.dbias[std::size_t(c)] += part_db[std::size_t(k * N + c)];
    }
  return ref;
}

RefForward reference_forward(const HostCase& hc) {
  const Spec& s = hc.spec;
  const std::int64_t M = s.M, N = s.N;
  RefForward ref;
  ref.y.assign(std::size_t(M * N), 0.0);
  ref.rstd.assign(std::size_t(M), 0.0);
  if (!s.rms) ref.mean.assign(std::size_t(M), 0.0);
  if (M == 0) return ref;
  const std::vector<double> w = s.has_weight ? hc.weight.to_double() : std::vector<double>();
  const std::vector<double> b = s.bias_present() ? hc.bias.to_double() : std::vector<double>();
  parallel_chunks(M, ref_grain(M, N), [&](std::int64_t, std::int64_t r0, std::int64_t r1) {
    const std::int64_t rows = r1 - r0;
    const std::vector<double> x = rows_to_f64(hc.x, s.x_layout(), r0, r1);
    const ConstRows xv{x.data(), DType::F64, rows, N, -1};
    std::optional<ConstVec> wv, bv;
    if (s.has_weight) wv = ConstVec{w.data(), DType::F64, N};
    if (s.bias_present()) bv = ConstVec{b.data(), DType::F64, N};
    const Rows yv{ref.y.data() + r0 * N, DType::F64, rows, N, -1};
    const Vec rv{ref.rstd.data() + r0, DType::F64, rows};
    if (s.rms) {
      RmsNormForwardArgs a;
      a.x = xv;
      a.weight = wv;
      a.eps = s.eps;
      a.y = yv;
      a.rstd = rv;
      rms_norm_forward(a, ExecConfig{Device::Cpu});
    } else {
      LayerNormForwardArgs a;
      a.x = xv;
      a.weight = wv;
      a.bias = bv;
      a.eps = s.eps;
      a.y = yv;
      a.mean = Vec{ref.mean.data() + r0, DType::F64, rows};
      a.rstd = rv;
      layer_norm_forward(a, ExecConfig{Device::Cpu});
    }
  });
  return ref;
}

std::unique_ptr<HostCase> take_rows(const HostCase& hc, const std::vector<std::int64_t>& rows) {
  auto out = std::make_unique<HostCase>();
  const Spec& s = hc.spec;
  out->spec = s;
  out->spec.name = s.name + "_rows";
  out->spec.M = std::int64_t(rows.size());
  out->spec.pad_x = out->spec.pad_dy = out->spec.pad_out = 0;
  out->spec.offset = 0;
  const Layout lx = s.x_layout(), ldy = s.dy_layout();
  const std::size_t e = dtype_size(s.dtype), row_bytes = std::size_t(s.N) * e;
  out->x = HostBuffer(s.dtype, out->spec.M * s.N);
  out->dy = HostBuffer(s.dtype, out->spec.M * s.N);
  out->rstd = HostBuffer(DType::F32, out->spec.M);
  if (!s.rms) out->mean = HostBuffer(DType::F32, out->spec.M);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t r = rows[i];
    std::memcpy(&out->x.bytes[i * row_bytes], &hc.x.bytes[std::size_t(lx.at(r, 0)) * e], row_bytes);
    std::memcpy(&out->dy.bytes[i * row_bytes], &hc.dy.bytes[std::size_t(ldy.at(r, 0)) * e], row_bytes);
    std::memcpy(&out->rstd.bytes[i * 4], &hc.rstd.bytes[std::size_t(r) * 4], 4);
    if (!s.rms) std::memcpy(&out->mean.bytes[i * 4], &hc.mean.bytes[std::size_t(r) * 4], 4);
  }
  out->weight = hc.weight;
  out->bias = hc.bias;
  return out;
}

void check_forward_and_backward(const Spec& spec, double floor) {
  SCOPED_TRACE(testing::PrintToString(spec));
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  check_forward(*hc, dc, reference_forward(*hc));
  const RefBackward ref = reference_backward(*hc);
  for (Strategy s : all_strategies()) {
    check_backward(*hc, dc, ref, spec.full_mask(), s, test_stream(), WsMode::Explicit, floor);
    check_backward(*hc, dc, ref, Mask{false, true, !spec.rms}, s, test_stream(), WsMode::Explicit, floor);
  }
}

const RefBackward& Bundle::backward_ref() {
  if (!ref) ref = reference_backward(*host, true);
  return *ref;
}

Bundle& cached_case(const Spec& spec) {
  auto& c = cache();
  auto it = c.find(spec.name);
  if (it != c.end()) return *it->second;
  auto b = std::make_unique<Bundle>();
  b->host = make_host_case(spec);
  b->dev = upload_case(*b->host, test_stream());
  Bundle& ref = *b;
  c.emplace(spec.name, std::move(b));
  return ref;
}

void drop_cached_case(const std::string& name) { cache().erase(name); }

// ---------------------------------------------------------------------------------------------
// comparisons
// ---------------------------------------------------------------------------------------------

void Err::add(double got, double ref, std::int64_t index) {
  ++count;
  if (std::isnan(ref)) {
    if (!std::isnan(got)) {
      ++bad;
      if (first_bad < 0) first_bad = index;
    }
    return;
  }
  if (!std::isfinite(got)) {
    ++bad;
    if (first_bad < 0) first_bad = index;
    return;
  }
  num += (got - ref) * (got - ref);
  den += ref * ref;
}

void Err::merge(const Err& o) {
  num += o.num;
  den += o.den;
  count += o.count;
  if (o.bad) {
    if (first_bad < 0 || (o.first_bad >= 0 && o.first_bad < first_bad)) first_bad = o.first_bad;
    bad += o.bad;
  }
}

double Err::rel(double floor) const {
  if (bad) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

std::string Err::describe(double floor) const {
  std::ostringstream os;
  os << "rel L2 error " << rel(floor) << " over " << count << " elements (||ref|| = " << std::sqrt(den)
     << ", ||got - ref|| = " << std::sqrt(num) << ")";
  if (bad) os << "; " << bad << " non-finite/unwritten elements, first at logical index " << first_bad;
  return os.str();
}

Err compare_matrix(const HostBuffer& got, const Layout& l, const std::vector<double>& ref) {
  Err total;
  if (std::int64_t(ref.size()) != l.rows * l.cols) {
    total.bad = 1;
    total.first_bad = 0;
    return total;
  }
  const std::int64_t grain = ref_grain(l.rows, l.cols);
  std::vector<Err> parts(std::size_t(chunk_count(l.rows, grain)));
  parallel_chunks(l.rows, grain, [&](std::int64_t chunk, std::int64_t r0, std::int64_t r1) {
    Err e;
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t c = 0; c < l.cols; ++c)
        e.add(got.get(l.at(r, c)), ref[std::size_t(r * l.cols + c)], r * l.cols + c);
    parts[std::size_t(chunk)] = e;
  });
  for (const Err& e : parts) total.merge(e);
  return total;
}

Err compare_vector(const HostBuffer& got, std::int64_t n, const std::vector<double>& ref) {
  Err e;
  if (std::int64_t(ref.size()) < n || got.count() < n) {
    e.bad = 1;
    e.first_bad = 0;
    return e;
  }
  for (std::int64_t i = 0; i < n; ++i) e.add(got.get(i), ref[std::size_t(i)], i);
  return e;
}

std::int64_t unpoisoned_bytes(const HostBuffer& b, std::int64_t begin, std::int64_t end) {
  const std::size_t es = dtype_size(b.dtype);
  const std::size_t lo = std::size_t(std::max<std::int64_t>(begin, 0)) * es;
  const std::size_t hi = std::min(std::size_t(std::max<std::int64_t>(end, 0)) * es, b.bytes.size());
  std::int64_t n = 0;
  for (std::size_t i = lo; i < hi; ++i) n += b.bytes[i] != test::kPoisonByte;
  return n;
}

std::int64_t unpoisoned_gap_bytes(const HostBuffer& b, const Layout& l) {
  const std::int64_t total = b.count();
  if (l.rows == 0) return unpoisoned_bytes(b, 0, total);
  std::int64_t n = unpoisoned_bytes(b, 0, l.offset);
  if (l.stride > l.cols) {
    const std::int64_t grain = std::max<std::int64_t>(1, 65536 / l.stride);
    std::vector<std::int64_t> parts(std::size_t(chunk_count(l.rows - 1, grain)), 0);
    parallel_chunks(l.rows - 1, grain, [&](std::int64_t chunk, std::int64_t r0, std::int64_t r1) {
      std::int64_t k = 0;
      for (std::int64_t r = r0; r < r1; ++r) k += unpoisoned_bytes(b, l.at(r, l.cols), l.at(r + 1, 0));
      parts[std::size_t(chunk)] = k;
    });
    for (std::int64_t k : parts) n += k;
  }
  n += unpoisoned_bytes(b, l.at(l.rows - 1, l.cols), total);
  return n;
}

// ---------------------------------------------------------------------------------------------
// GPU calls
// ---------------------------------------------------------------------------------------------

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> s{Strategy::Simple, Strategy::Tiled, Strategy::TwoPass, Strategy::Fused,
                                       Strategy::Auto};
  return s;
}

// The library's names are identifier-safe already; one list of them, in src/core/types.cpp.
std::string strategy_id(Strategy s) { return strategy_name(s); }

std::string mask_id(Mask m) {
  std::string s;
  if (m.dx) s += "dx_";
  if (m.dweight) s += "dw_";
  if (m.dbias) s += "db_";
  if (s.empty()) return "none";
  s.pop_back();
  return s;
}

std::string dtype_id(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
  }
  return "unknown";
}

namespace {
const void* at_offset(const DeviceBuffer& b, std::int64_t elements, DType t) {
  return b.bytes_ptr() + std::size_t(elements) * dtype_size(t);
}
std::int64_t row_stride_arg(const Layout& l) { return l.stride == l.cols ? -1 : l.stride; }
}  // namespace

BackwardOut gpu_backward(const HostCase& hc, const DeviceCase& dc, Mask mask, Strategy strategy, cudaStream_t stream,
                         WsMode ws_mode, const PlannerTable* table) {
  const Spec& s = hc.spec;
  if (s.rms) mask.dbias = false;
  const DType t = s.dtype, wt = s.weight_dtype();
  const Layout lx = s.x_layout(), ldy = s.dy_layout(), lo = s.out_layout();
  BackwardOut out;
  out.mask = mask;

  DeviceBuffer ddx, ddw, ddb;
  if (mask.dx) ddx = DeviceBuffer(std::size_t(lo.elements()) * dtype_size(t));
  if (mask.dweight) ddw = DeviceBuffer(std::size_t(s.N + kGuard) * dtype_size(wt));
  if (mask.dbias) ddb = DeviceBuffer(std::size_t(s.N + kGuard) * dtype_size(wt));
  ddx.poison(stream);
  ddw.poison(stream);
  ddb.poison(stream);

  const ConstRows x{at_offset(dc.x, lx.offset, t), t, s.M, s.N, row_stride_arg(lx)};
  const ConstRows dy{at_offset(dc.dy, ldy.offset, t), t, s.M, s.N, row_stride_arg(ldy)};
  std::optional<ConstVec> w;
  if (s.has_weight) w = ConstVec{at_offset(dc.weight, s.weight_offset, wt), wt, s.N};
  std::optional<Rows> dx;
  if (mask.dx) dx = Rows{const_cast<void*>(at_offset(ddx, lo.offset, t)), t, s.M, s.N, row_stride_arg(lo)};
  std::optional<Vec> dw, db;
  if (mask.dweight) dw = Vec{ddw.get(), wt, s.N};
  if (mask.dbias) db = Vec{ddb.get(), wt, s.N};
  const ConstVec rstd{dc.rstd.get(), DType::F32, s.M};

  LayerNormBackwardArgs la;
  RmsNormBackwardArgs ra;
  if (s.rms) {
    ra.dy = dy;
    ra.x = x;
    ra.rstd = rstd;
    ra.weight = w;
    ra.dx = dx;
    ra.dweight = dw;
  } else {
    la.dy = dy;
    la.x = x;
    la.mean = ConstVec{dc.mean.get(), DType::F32, s.M};
    la.rstd = rstd;
    la.weight = w;
    la.dx = dx;
    la.dweight = dw;
    la.dbias = db;
  }
  ExecConfig cfg{Device::Cuda, stream, strategy, table};
  cfg.caller_checked_pointers = caller_checked_pointers;
  auto plan_call = [&] { return s.rms ? plan_rms_norm_backward(ra, cfg) : plan_layer_norm_backward(la, cfg); };
  auto ws_call = [&] {
    return s.rms ? rms_norm_backward_workspace_size(ra, cfg) : layer_norm_backward_workspace_size(la, cfg);
  };
  auto run_explicit = [&](Workspace ws) {
    if (s.rms) rms_norm_backward(ra, cfg, ws);
    else layer_norm_backward(la, cfg, ws);
  };
  auto run_convenience = [&] {
    if (s.rms) rms_norm_backward(ra, cfg);
    else layer_norm_backward(la, cfg);
  };
  auto download_outputs = [&] {
    if (mask.dx) out.dx = ddx.download(t, stream);
    if (mask.dweight) out.dweight = ddw.download(wt, stream);
    if (mask.dbias) out.dbias = ddb.download(wt, stream);
  };

  // The library's own view of this call (alignment of the actual pointers included).
  const Problem problem = s.rms ? detail::planner_problem(detail::to_problem(ra))
                                : detail::planner_problem(detail::to_problem(la));
  if (strategy != Strategy::Auto && !strategy_supported(problem, strategy, &out.why_not)) {
    std::printf("[   INFO   ] %s: %s unsupported (expecting normkit::Error): %s\n", s.name.c_str(),
                strategy_id(strategy).c_str(), out.why_not.c_str());
    EXPECT_THROW(plan_call(), Error) << "plan for unsupported strategy " << strategy_id(strategy);
    EXPECT_THROW(ws_call(), Error) << "workspace size for unsupported strategy " << strategy_id(strategy);
    EXPECT_THROW(run_convenience(), Error) << "backward with unsupported strategy " << strategy_id(strategy);
    DeviceBuffer dummy(1 << 20);
    EXPECT_THROW(run_explicit(Workspace{dummy.get(), dummy.bytes()}), Error)
        << "backward (explicit workspace) with unsupported strategy " << strategy_id(strategy);
    NK_CUDA(cudaStreamSynchronize(stream));
    download_outputs();
    // "Nothing is written to any output when it is thrown by validation."
    if (mask.dx) EXPECT_EQ(unpoisoned_bytes(out.dx, 0, out.dx.count()), 0) << "dx written by a rejected call";
    if (mask.dweight)
      EXPECT_EQ(unpoisoned_bytes(out.dweight, 0, out.dweight.count()), 0) << "dweight written by a rejected call";
    if (mask.dbias)
      EXPECT_EQ(unpoisoned_bytes(out.dbias, 0, out.dbias.count()), 0) << "dbias written by a rejected call";
    out.ran = false;
    return out;
  }

  out.plan = plan_call();
  EXPECT_NE(out.plan.strategy, Strategy::Auto) << "a plan never says auto";
  if (strategy != Strategy::Auto) {
    EXPECT_EQ(strategy_id(out.plan.strategy), strategy_id(strategy)) << "forced strategy silently substituted";
  } else {
    std::string why;
    EXPECT_TRUE(strategy_supported(problem, out.plan.strategy, &why))
        << "auto chose " << strategy_id(out.plan.strategy) << " which strategy_supported rejects: " << why;
  }
  if (ws_mode == WsMode::Explicit) {
    const std::size_t bytes = ws_call();
    EXPECT_GE(bytes, out.plan.workspace_bytes);
    // Round the buffer up and poison it: kernels must not rely on zeroed scratch.
    DeviceBuffer ws(bytes ? bytes + 256 : 0);
    ws.poison(stream);
    run_explicit(Workspace{ws.get(), bytes});
    NK_CUDA(cudaStreamSynchronize(stream));
    NK_CUDA(cudaGetLastError());
  } else {
    run_convenience();
    NK_CUDA(cudaStreamSynchronize(stream));
    NK_CUDA(cudaGetLastError());
  }
  download_outputs();
  out.ran = true;
  return out;
}

void expect_backward_matches(const HostCase& hc, const BackwardOut& out, const RefBackward& ref, double floor) {
  const Spec& s = hc.spec;
  SCOPED_TRACE("plan: " + out.plan.describe());
  if (out.mask.dx) {
    const Layout lo = s.out_layout();
    const Err e = compare_matrix(out.dx, lo, ref.dx);
    EXPECT_LE(e.rel(floor), test::tolerance(s.dtype)) << "dx: " << e.describe(floor);
    EXPECT_EQ(unpoisoned_gap_bytes(out.dx, lo), 0) << "dx: bytes outside the [M, N] view were written";
  }
  if (out.mask.dweight) {
    const Err e = compare_vector(out.dweight, s.N, ref.dweight);
    EXPECT_LE(e.rel(floor), test::tolerance(s.weight_dtype())) << "dweight: " << e.describe(floor);
    EXPECT_EQ(unpoisoned_bytes(out.dweight, s.N, s.N + kGuard), 0) << "dweight: written beyond its N elements";
  }
  if (out.mask.dbias) {
    const Err e = compare_vector(out.dbias, s.N, ref.dbias);
    EXPECT_LE(e.rel(floor), test::tolerance(s.weight_dtype())) << "dbias: " << e.describe(floor);
    EXPECT_EQ(unpoisoned_bytes(out.dbias, s.N, s.N + kGuard), 0) << "dbias: written beyond its N elements";
  }
}

void expect_same_bits(const BackwardOut& a, const BackwardOut& b, const std::string& what) {
  EXPECT_TRUE(a.dx.bytes == b.dx.bytes) << what << ": dx differs between identical calls";
  EXPECT_TRUE(a.dweight.bytes == b.dweight.bytes) << what << ": dweight differs between identical calls";
  EXPECT_TRUE(a.dbias.bytes == b.dbias.bytes) << what << ": dbias differs between identical calls";
}

bool check_backward(const HostCase& hc, const DeviceCase& dc, const RefBackward& ref, Mask mask, Strategy strategy,
                    cudaStream_t stream, WsMode ws, double floor) {
  SCOPED_TRACE(hc.spec.name + " strategy=" + strategy_id(strategy) + " mask=" + mask_id(mask) +
               (ws == WsMode::Explicit ? " (explicit workspace)" : " (allocating overload)"));
  const BackwardOut out = gpu_backward(hc, dc, mask, strategy, stream, ws);
  if (out.ran) expect_backward_matches(hc, out, ref, floor);
  return out.ran;
}

ForwardOut gpu_forward(const HostCase& hc, const DeviceCase& dc, cudaStream_t stream, const PlannerTable* table) {
  const Spec& s = hc.spec;
  const DType t = s.dtype, wt = s.weight_dtype();
  const Layout lx = s.x_layout(), lo = s.out_layout();
  DeviceBuffer dyb(std::size_t(lo.elements()) * dtype_size(t));
  DeviceBuffer dmean(s.rms ? 0 : std::size_t(s.M + kGuard) * 4), drstd(std::size_t(s.M + kGuard) * 4);
  dyb.poison(stream);
  dmean.poison(stream);
  drstd.poison(stream);
  const ConstRows x{at_offset(dc.x, lx.offset, t), t, s.M, s.N, row_stride_arg(lx)};
  const Rows y{const_cast<void*>(at_offset(dyb, lo.offset, t)), t, s.M, s.N, row_stride_arg(lo)};
  std::optional<ConstVec> w, b;
  if (s.has_weight) w = ConstVec{at_offset(dc.weight, s.weight_offset, wt), wt, s.N};
  if (s.bias_present()) b = ConstVec{at_offset(dc.bias, s.weight_offset, wt), wt, s.N};
  ExecConfig cfg{Device::Cuda, stream, Strategy::Auto, table};
  cfg.caller_checked_pointers = caller_checked_pointers;
  ForwardOut out;
  if (s.rms) {
    RmsNormForwardArgs a;
    a.x = x;
    a.weight = w;
    a.eps = s.eps;
    a.y = y;
    a.rstd = Vec{drstd.get(), DType::F32, s.M};
    out.plan = plan_rms_norm_forward(a, cfg);
    rms_norm_forward(a, cfg);
  } else {
    LayerNormForwardArgs a;
    a.x = x;
    a.weight = w;
    a.bias = b;
    a.eps = s.eps;
    a.y = y;
    a.mean = Vec{dmean.get(), DType::F32, s.M};
    a.rstd = Vec{drstd.get(), DType::F32, s.M};
    out.plan = plan_layer_norm_forward(a, cfg);
    layer_norm_forward(a, cfg);
  }
  NK_CUDA(cudaStreamSynchronize(stream));
  NK_CUDA(cudaGetLastError());
  out.y = dyb.download(t, stream);
  if (!s.rms) out.mean = dmean.download(DType::F32, stream);
  out.rstd = drstd.download(DType::F32, stream);
  return out;
}

void expect_forward_matches(const HostCase& hc, const ForwardOut& out, const RefForward& ref) {
  const Spec& s = hc.spec;
  const Layout lo = s.out_layout();
  const Err ey = compare_matrix(out.y, lo, ref.y);
  EXPECT_LE(ey.rel(), test::tolerance(s.dtype)) << "y: " << ey.describe();
  EXPECT_EQ(unpoisoned_gap_bytes(out.y, lo), 0) << "y: bytes outside the [M, N] view were written";
  constexpr double kStatsTol = 1e-5;  // mean/rstd are F32: compared at fp32 level
  if (!s.rms) {
    const Err em = compare_vector(out.mean, s.M, ref.mean);
    EXPECT_LE(em.rel(), kStatsTol) << "mean: " << em.describe();
    EXPECT_EQ(unpoisoned_bytes(out.mean, s.M, s.M + kGuard), 0) << "mean: written beyond its M elements";
  }
  const Err er = compare_vector(out.rstd, s.M, ref.rstd);
  EXPECT_LE(er.rel(), kStatsTol) << "rstd: " << er.describe();
  EXPECT_EQ(unpoisoned_bytes(out.rstd, s.M, s.M + kGuard), 0) << "rstd: written beyond its M elements";
}

void expect_same_bits(const ForwardOut& a, const ForwardOut& b, const std::string& what) {
  EXPECT_TRUE(a.y.bytes == b.y.bytes) << what << ": forward y differs between identical calls";
  EXPECT_TRUE(a.rstd.bytes == b.rstd.bytes) << what << ": forward rstd differs between identical calls";
  EXPECT_TRUE(a.mean.bytes == b.mean.bytes) << what << ": forward mean differs between identical calls";
}

namespace {
/// `t` with the forward's one-row-a-block walk off (RowShape::block_rows).
PlannerTable without_block_row_walk(PlannerTable t) {
  t.forward_block_rows_below_bytes = 0;
  return t;
}
/// `t` with the forward's short-row walk off: neither its short rows nor LayerNorm's warp rows (of
/// up to 8 or of 16 vectors a lane); nor the one-row-a-block walk, which comes before both.
PlannerTable without_short_row_walk(PlannerTable t) {
  t.forward_short_rows_min_bytes = std::numeric_limits<std::int64_t>::max();
  t.ln_forward_warp_rows_min_bytes = std::numeric_limits<std::int64_t>::max();
  t.ln_forward_long_warp_rows_min_bytes = std::numeric_limits<std::int64_t>::max();
  return without_block_row_walk(t);
}
}  // namespace

const PlannerTable& forward_block_rows_table(bool block_rows) {
  static const PlannerTable every_row = [] {
    PlannerTable t;
    t.forward_block_rows_below_bytes = std::numeric_limits<std::int64_t>::max();
    t.ln_forward_block_rows_wide_below_bytes = std::numeric_limits<std::int64_t>::max();
    t.forward_block_rows_narrow_below_bytes = std::numeric_limits<std::int64_t>::max();
    return t;
  }();
  static const PlannerTable no_row = without_block_row_walk(PlannerTable{});
  return block_rows ? every_row : no_row;
}

const PlannerTable& forward_packed_block_rows_table(bool packed) {
  static const PlannerTable tables[2] = {[] {
                                           PlannerTable t = forward_block_rows_table(true);
                                           t.forward_block_rows_packed_min_rows_per_sm = std::int64_t(1) << 40;
                                           return t;
                                         }(),
                                         [] {
                                           PlannerTable t = forward_block_rows_table(true);
                                           t.forward_block_rows_packed_min_rows_per_sm = 0;
                                           t.forward_block_rows_packed_mixed_min_bytes = 0;
                                           t.forward_block_rows_packed_mixed_widest_min_bytes = 0;
                                           return t;
                                         }()};
  return tables[packed ? 1 : 0];
}

const PlannerTable& forward_packed_table(bool packed) {
  // (short rows take the short-row walk before the packed one, and rows of a block the one-row-a-block
  // walk before both: off in both tables, check_forward runs them)
  static const PlannerTable every_row = [] {
    PlannerTable t;
    t.rms_forward_packed_min_bytes = 0;
    return without_short_row_walk(t);
  }();
  static const PlannerTable no_row = [] {
    PlannerTable t;
    t.rms_forward_packed_min_bytes = std::numeric_limits<std::int64_t>::max();
    return without_short_row_walk(t);
  }();
  return packed ? every_row : no_row;
}

const PlannerTable& forward_short_rows_table(bool short_rows) {
  static const PlannerTable every_row = [] {
    PlannerTable t;
    t.forward_short_rows_min_bytes = 0;
    t.forward_short_rows_max_vectors = kShortRowMaxVectors;
    return without_block_row_walk(t);  // (which comes first for rows of more than a warp's vectors)
  }();
  static const PlannerTable no_row = without_short_row_walk(PlannerTable{});
  return short_rows ? every_row : no_row;
}

namespace {
/// `out` ran the built-in table's forward walk; this runs the walk that `flag` marks the other way
/// (table_of(!flag) of the plan `out` ran), against the reference, and where the two plans differ,
/// repeats the flagged walk's bits.
void check_other_walk(const HostCase& hc, const DeviceCase& dc, const RefForward& ref, cudaStream_t stream,
                      const ForwardOut& out, bool RowShape::*flag, const PlannerTable& (*table_of)(bool),
                      const char* every_row, const char* no_row, const char* walk_name) {
  const PlannerTable& other = table_of(!(out.plan.row.*flag));
  const ForwardOut walk = gpu_forward(hc, dc, stream, &other);
  const bool walk_flagged = walk.plan.row.*flag;
  if (walk_flagged == out.plan.row.*flag) return;
  SCOPED_TRACE(walk_flagged ? every_row : no_row);
  expect_forward_matches(hc, walk, ref);
  const ForwardOut& flagged = walk_flagged ? walk : out;
  if (!testing::Test::HasFailure())
    expect_same_bits(flagged, gpu_forward(hc, dc, stream, walk_flagged ? &other : nullptr), walk_name);
}
}  // namespace

void check_forward(const HostCase& hc, const DeviceCase& dc, const RefForward& ref, cudaStream_t stream) {
  SCOPED_TRACE(hc.spec.name + " forward");
  const ForwardOut out = gpu_forward(hc, dc, stream);
  expect_forward_matches(hc, out, ref);
  // Short rows have two walks (RowShape::short_rows from forward_short_rows_min_bytes of x, the general
  // walk below it), and rows of more than a warp's vectors the one-row-a-block walk (RowShape::block_rows,
  // below forward_block_rows_below_bytes of x) and the walks after it: each time the call above ran the
  // built-in table's walk, this one runs the other where the rows can take it, at any M.
  check_other_walk(hc, dc, ref, stream, out, &RowShape::short_rows, forward_short_rows_table,
                   "every short row on the short-row walk", "no short-row walk", "short-row walk");
  check_other_walk(hc, dc, ref, stream, out, &RowShape::block_rows, forward_block_rows_table,
                   "every row it can on the one-row-a-block walk", "no one-row-a-block walk", "one-row-a-block walk");
  // ... and of its blocks that have a packed instance, the other instance (at any M)
  check_other_walk(hc, dc, ref, stream, out, &RowShape::block_rows_packed, forward_packed_block_rows_table,
                   "every row it can on the packed one-row-a-block walk", "the unpacked one-row-a-block walk",
                   "packed one-row-a-block walk");
  // Both row walks of a cached RMSNorm row, whichever the built-in table picks: the packed one
  // (RowShape::packed) where it can serve, and the staged / small-grid one. The call above ran the
  // built-in table's walk; this one runs the other. LayerNorm has one walk.
  if (!hc.spec.rms) return;
  const bool packed = !out.plan.row.packed;
  SCOPED_TRACE(packed ? "every forward row packed" : "no forward row packed");
  const PlannerTable& table = forward_packed_table(packed);
  const ForwardOut walk = gpu_forward(hc, dc, stream, &table);
  if (!packed) EXPECT_FALSE(walk.plan.row.packed) << walk.plan.describe();
  // (the wide scalar rows have no packed instance: 8 elements a thread do not fit its 40 registers)
  if (packed && walk.plan.row.items > 0 && walk.plan.row.split == 1 &&
      !scalar_wide_row_items(walk.plan.row.items, walk.plan.row.vec))
    EXPECT_TRUE(walk.plan.row.packed) << walk.plan.describe();
  expect_forward_matches(hc, walk, ref);
  const ForwardOut& packed_walk = packed ? walk : out;
  if (packed_walk.plan.row.packed && !testing::Test::HasFailure())
    expect_same_bits(packed_walk, gpu_forward(hc, dc, stream, packed ? &table : nullptr), "packed walk");
}

CallerCheckedPointers::CallerCheckedPointers() : previous_(caller_checked_pointers) {
  caller_checked_pointers = true;
}
CallerCheckedPointers::~CallerCheckedPointers() { caller_checked_pointers = previous_; }

}  // namespace normkit::gputest
