// cairn-plan calibrate: measures OpenBLAS GEMM efficiency over the model's shapes and memory bandwidth,
// and writes them into a cluster TOML file the cost model reads.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include "cairn/cli.h"
#include "cairn/error.h"
#include "cairn/files.h"
#include "cairn/log.h"
#include "cairn/provenance.h"
#include "plan.h"

namespace cairn::plan {

namespace {
using clk = std::chrono::steady_clock;
double since(clk::time_point t) { return std::chrono::duration<double>(clk::now() - t).count(); }
}  // namespace

double measure_sgemm(int64_t m, int64_t n, int64_t k, double seconds) {
  std::vector<float> A(size_t(m * k)), B(size_t(k * n)), C(size_t(m * n));
  for (size_t i = 0; i < A.size(); ++i) A[i] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = float((i * 40503u) % 1000) * 1e-3f - 0.5f;
  auto call = [&]() {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, A.data(), int(k), B.data(),
                int(n), 0.0f, C.data(), int(n));
  };
  call();  // warm-up: thread pool, caches, page faults
  int64_t iters = 0;
  const auto t0 = clk::now();
  double el = 0;
  do {
    call();
    ++iters;
    el = since(t0);
  } while (el < seconds);
  return 2.0 * double(m) * double(n) * double(k) * double(iters) / el;
}

double measure_stream_gbps(size_t bytes, double seconds) {
  const size_t n = std::max<size_t>(1 << 16, bytes / (3 * sizeof(float)));
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  auto triad = [&]() {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
  };
  triad();
  int64_t iters = 0;
  const auto t0 = clk::now();
  double el = 0;
  do {
    triad();
    ++iters;
    el = since(t0);
  } while (el < seconds);
  if (a[n / 2] != 2.0f) CAIRN_LOG_WARN("stream triad produced an unexpected value");
  return 3.0 * double(n) * sizeof(float) * double(iters) / el / 1e9;
}

namespace {

// Checks the options and picks the device: the GPU (cuBLAS) for --device gpu, or for auto when one is found.
bool calibrate_on_gpu(const CalibrateOptions& opts) {
  if (opts.seconds <= 0 || opts.max_dim < 16) throw UsageError("calibrate: --seconds must be > 0 and --max-dim >= 16");
  if (opts.device != "auto" && opts.device != "cpu" && opts.device != "gpu")
    throw UsageError("calibrate: --device must be auto, cpu or gpu, not \"" + opts.device + "\"");
  bool gpu = false;
#ifdef CAIRN_PLAN_CUBLAS
  std::string why;
  bool broken = false;
  const bool have_gpu = cublas_available(&why, &broken);
  // Asking for a device this machine lacks is a usage error (exit 2), as cairn-train and cairn-sweep treat it; a GPU
  // whose driver fails (too old for the runtime, ...) is a runtime failure (exit 1), and a warning under auto.
  if (broken && opts.device == "gpu") throw RuntimeError("calibrate --device gpu: " + why);
  if (broken && opts.device == "auto") CAIRN_LOG_WARN("calibrate --device auto: measuring the CPU: %s", why.c_str());
  if (opts.device == "gpu" && !have_gpu) throw UsageError("calibrate --device gpu: " + why);
  gpu = opts.device != "cpu" && have_gpu;
#else
  if (opts.device == "gpu") throw UsageError("calibrate --device gpu: this cairn-plan was built without CUDA");
#endif
  return gpu;
}

using Shape = std::array<int64_t, 3>;  // M x N x K

// Shapes the model needs at micro-batch 1 (M x N x K), forward and backward forms, for TP 1
// (and TP 2..8 on a GPU, whose GEMMs they shrink), attention's two GEMMs per head, then squares and
// K = 64 panels up to --max-dim (16384 at least on a GPU).
std::vector<Shape> calibration_shapes(const costmodel::ModelSpec& m, bool gpu, const CalibrateOptions& opts) {
  const int64_t T = m.seq_len, h = m.hidden, f = m.ffn_hidden, kv = m.kv_heads * m.head_dim(), d = m.head_dim();
  const int64_t up = m.arch == costmodel::Arch::Gpt ? f : 2 * f;
  std::vector<Shape> shapes;
  for (int64_t t : gpu ? std::vector<int64_t>{1, 2, 4, 8} : std::vector<int64_t>{1}) {
    if (h % t || f % t) continue;
    const int64_t qkv = std::max<int64_t>(1, (h + 2 * kv) / t);
    for (auto sh : std::vector<Shape>{{T, qkv, h},
                                      {T, h, h / t},
                                      {T, up / t, h},
                                      {T, h, f / t},
                                      {T, h, qkv},
                                      {h, qkv, T},
                                      {T, f / t, h},
                                      {f / t, h, T},
                                      {T, m.vocab / t, h}})
      shapes.push_back(sh);
  }
  shapes.push_back({T, T, d});
  shapes.push_back({T, d, T});
  const int64_t max_dim = gpu ? std::max(opts.max_dim, 16384) : opts.max_dim;
  for (int64_t s = 32; s <= max_dim; s *= 2) shapes.push_back({s, s, s});
  for (int64_t s = 64; s <= max_dim; s *= 4) shapes.push_back({s, s, 64});
  return shapes;
}

// FLOP/s of one GEMM shape: cuBLAS bf16 on the GPU, else OpenBLAS sgemm.
double measure_gemm(bool gpu, int64_t a, int64_t b, int64_t c, double secs) {
#ifdef CAIRN_PLAN_CUBLAS
  if (gpu) return measure_gemm_cublas(a, b, c, secs);
#endif
  return measure_sgemm(a, b, c, secs);
}

struct GemmMeasurements {
  std::vector<std::pair<double, double>> points;  // (flops of one call, FLOP/s)
  std::vector<std::array<double, 4>> measured;    // (m, n, k, FLOP/s) of each shape, for the shape table
};

GemmMeasurements measure_shapes(const std::vector<Shape>& shapes, bool gpu, double seconds) {
  const double max_flops = gpu ? 1e14 : 4e11;
  GemmMeasurements g;
  for (auto sh : shapes) {
    double fl = 2.0 * double(sh[0]) * double(sh[1]) * double(sh[2]);
    // Too big for this machine in reasonable time: shrink the token dimension, keep the others.
    while (fl > max_flops && sh[0] > 64) {
      sh[0] /= 2;
      fl /= 2;
    }
    if (fl > max_flops) continue;
    const double rate = measure_gemm(gpu, sh[0], sh[1], sh[2], seconds);
    g.points.emplace_back(fl, rate);
    g.measured.push_back({double(sh[0]), double(sh[1]), double(sh[2]), rate});
    CAIRN_LOG_INFO("%s %lld x %lld x %lld: %.2f GFLOP/s", gpu ? "cublas bf16" : "sgemm", (long long)sh[0],
                   (long long)sh[1], (long long)sh[2], rate / 1e9);
  }
  return g;
}

// FP8 (E4M3) GEMM FLOP/s at each measured shape, on GPUs with FP8 tensor cores (Ada, Hopper and later) with
// cuBLASLt; each shape is rounded up to the multiples of 16 its FP8 kernels need (the rate is that shape's).
// Empty, with the reason logged, where the GPU has none or cuBLASLt cannot run one: the bf16 table stays usable.
std::vector<double> measure_fp8_shapes(bool gpu, const GemmMeasurements& g, double seconds) {
  std::vector<double> rates;
#ifdef CAIRN_PLAN_CUBLAS
  if (!gpu) return rates;
  std::string why;
  if (!fp8_tensor_cores(&why)) {
    CAIRN_LOG_INFO("no FP8 GEMM table: %s", why.c_str());
    return rates;
  }
  auto up16 = [](double x) { return (int64_t(x) + 15) / 16 * 16; };
  try {
    for (const auto& x : g.measured) {
      const int64_t m = up16(x[0]), n = up16(x[1]), k = up16(x[2]);
      rates.push_back(measure_gemm_fp8_cublaslt(m, n, k, seconds));
      CAIRN_LOG_INFO("cublasLt fp8 %lld x %lld x %lld: %.2f GFLOP/s", (long long)m, (long long)n, (long long)k,
                     rates.back() / 1e9);
    }
  } catch (const RuntimeError& e) {
    CAIRN_LOG_WARN("no FP8 GEMM table: %s", e.what());
    rates.clear();
  }
#else
  (void)gpu, (void)g, (void)seconds;
#endif
  return rates;
}

// Memory bandwidth in GB/s: HBM on the GPU, a stream triad on the CPU.
double measure_memory_gbps(bool gpu, double seconds) {
  double stream = 0;
#ifdef CAIRN_PLAN_CUBLAS
  if (gpu) stream = measure_hbm_cuda_gbps(size_t(1) << 30, std::max(0.2, seconds));
#endif
  if (!gpu) stream = measure_stream_gbps(size_t(192) << 20, std::max(0.2, seconds));
  return stream;
}

std::string gemm_library(bool gpu) {
  std::string library = "OpenBLAS sgemm (fp32)";
#ifdef CAIRN_PLAN_CUBLAS
  if (gpu) library = "cuBLAS bf16 GEMM on " + cuda_device_name();
#endif
  return library;
}

// The peak efficiencies are relative to: [cluster] peak_tflops when the config sets it, else (or when a
// measurement beats it) the best measured rate.
struct Peak {
  double best = 0, peak = 0;  // FLOP/s
};

Peak calibration_peak(const Config& cfg, const std::vector<double>& rates, const char* key, double given) {
  Peak r;
  double& best = r.best;
  for (double rate : rates) best = std::max(best, rate);
  const bool peak_given =
      cfg.origin(std::string(ClusterSection::kSection) + "." + key).kind != Origin::Default && given > 0;
  double& peak = r.peak;
  peak = peak_given ? given * 1e12 : best;
  if (best > peak) {
    CAIRN_LOG_WARN("measured %.3f TFLOP/s exceeds [cluster] %s = %.3f; using the measurement as peak", best / 1e12, key,
                   peak / 1e12);
    peak = best;
  }
  return r;
}

// The [cluster] table of the written file, in place of the config's: every key of the config's [cluster],
// rewritten with the measurements (empty values dropped).
json calibrated_cluster(const Config& cfg, const GemmMeasurements& g, double peak, const std::vector<double>& fp8_rates,
                        double fp8_peak, double overhead_us, double stream, const std::string& library) {
  // Table: log-spaced bins (a factor 2 wide) of size, best efficiency of the shapes in each bin
  // (the library's own choice of kernel for that size), ascending.
  std::map<int, std::pair<double, double>> bins;  // bin -> (flops, efficiency)
  for (const auto& [fl, rate] : g.points) {
    const int bin = int(std::floor(std::log2(fl)));
    auto& b = bins[bin];
    if (rate / peak > b.second) b = {fl, rate / peak};
  }
  std::vector<double> xs, ys;
  for (const auto& [bin, p] : bins) {
    xs.push_back(p.first);
    ys.push_back(std::min(1.0, std::max(1e-4, p.second)));
  }
  json cluster = cfg.section(ClusterSection::kSection);  // every key, rewritten below with the measurements
  cluster["peak_tflops"] = peak / 1e12;
  cluster["gemm_flops"] = xs;
  cluster["gemm_efficiency"] = ys;
  cluster["gemm_max_efficiency"] = *std::max_element(ys.begin(), ys.end());
  // Every measured shape: the cost model corrects its shape model by these where they are near.
  json tm = json::array(), tn = json::array(), tk = json::array(), te = json::array();
  for (const auto& x : g.measured) {
    tm.push_back(x[0]);
    tn.push_back(x[1]);
    tk.push_back(x[2]);
    te.push_back(std::min(1.0, std::max(1e-4, x[3] / peak)));
  }
  cluster["gemm_table_m"] = tm;
  cluster["gemm_table_n"] = tn;
  cluster["gemm_table_k"] = tk;
  cluster["gemm_table_efficiency"] = te;
  // FP8 at the same shapes, or none: a table from an earlier calibration does not fit the new shapes.
  cluster.erase("gemm_table_fp8_efficiency");
  if (!fp8_rates.empty()) {
    json fe = json::array();
    double best = 0;
    for (double rate : fp8_rates) {
      fe.push_back(std::min(1.0, std::max(1e-4, rate / fp8_peak)));
      best = std::max(best, fe.back().get<double>());
    }
    cluster["peak_fp8_tflops"] = fp8_peak / 1e12;
    cluster["gemm_table_fp8_efficiency"] = fe;
    cluster["fp8_gemm_max_efficiency"] = best;
  }
  cluster["kernel_overhead_us"] = overhead_us;
  cluster["hbm_gbps"] = stream;
  cluster["hbm_efficiency"] = 1.0;
  cluster["calibrated"] = strprintf("cairn-plan calibrate on %s at %s: %s%s, %d CPU thread%s",
                                    hostname_string().c_str(), utc_now_iso8601().c_str(), library.c_str(),
                                    fp8_rates.empty() ? "" : " and FP8 E4M3 cuBLASLt GEMMs at the same shapes",
                                    omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
  for (auto it = cluster.begin(); it != cluster.end();) {
    if (it.value().is_null() || (it.value().is_string() && it.value().get<std::string>().empty()))
      it = cluster.erase(it);
    else ++it;
  }
  return cluster;
}

}  // namespace

std::string run_calibrate(const Config& cfg, const CalibrateOptions& opts) {
  const costmodel::ModelSpec m = costmodel::model_from_section(read_section<ModelSection>(cfg));
  const bool gpu = calibrate_on_gpu(opts);
  if (!gpu) {
    // A CPU "device" is one rank's share of the node, as cairn-train runs it ([train] threads, or the cores over
    // the ranks per node): a rate measured on every core, divided by one rank's peak, overstated the efficiency.
    const int64_t set = read_section<TrainSection>(cfg).threads;
    const int64_t per_node = std::max<int64_t>(1, read_section<ClusterSection>(cfg).gpus_per_node);
    const int threads = set > 0 ? int(set) : std::max(1, int(omp_get_max_threads() / per_node));
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    CAIRN_LOG_INFO("measuring with %d CPU thread%s (%s)", threads, threads == 1 ? "" : "s",
                   set > 0 ? "[train] threads" : "the cores over [cluster] gpus_per_node, as cairn-train shares them");
  }
  const std::vector<Shape> shapes = calibration_shapes(m, gpu, opts);
  const auto t0 = clk::now();
  const GemmMeasurements g = measure_shapes(shapes, gpu, opts.seconds);
  const std::vector<double> fp8_rates = measure_fp8_shapes(gpu, g, opts.seconds);
  const double tiny = measure_gemm(gpu, 8, 8, 8, opts.seconds / 4);
  const double overhead_us = 2.0 * 512 / tiny * 1e6;
  const double stream = measure_memory_gbps(gpu, opts.seconds);
  CAIRN_LOG_INFO("memory %.1f GB/s; smallest GEMM %.2f us; %.1f s measuring", stream, overhead_us, since(t0));
  const std::string library = gemm_library(gpu);

  std::vector<double> rates;
  for (const auto& p : g.points) rates.push_back(p.second);
  const ClusterSection cs = read_section<ClusterSection>(cfg);
  const Peak pk = calibration_peak(cfg, rates, "peak_tflops", cs.peak_tflops);
  const Peak fp8 = calibration_peak(cfg, fp8_rates, "peak_fp8_tflops", cs.peak_fp8_tflops);
  const json cluster = calibrated_cluster(cfg, g, pk.peak, fp8_rates, fp8.peak, overhead_us, stream, library);
  std::string path = opts.output;
  if (path.empty()) path = join_path(run_subdir(run_dir(cfg), "plan"), "cluster-calibrated.toml");
  const std::string text = "# Cluster file written by cairn-plan calibrate (GEMM efficiency = measured / peak).\n" +
                           provenance_comment_lines(cfg) + json_to_toml(json{{"cluster", cluster}});
  atomic_write(path, text);
  CAIRN_LOG_INFO("wrote %s (%zu GEMM sizes, peak %.3f TFLOP/s, best efficiency %.2f)", path.c_str(),
                 cluster["gemm_flops"].size(), pk.peak / 1e12, pk.best / pk.peak);
  return path;
}

}  // namespace cairn::plan
