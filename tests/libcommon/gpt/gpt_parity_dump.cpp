// Writes a small GPT's weights, one batch, its logits, loss, gradients and 10 AdamW-step losses to HDF5,
// for torch_parity.py to recompute in PyTorch. Usage: gpt_parity_dump <backend> <out.h5>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cairn/gpt.h"
#include "cairn/h5.h"
#include "cairn/kernels/backend.h"

using namespace cairn;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gpt_parity_dump <backend> <out.h5>\n");
    return 2;
  }
  const kernels::Backend* be = kernels::find_backend(argv[1]);
  if (!be) {
    std::fprintf(stderr, "gpt_parity_dump: %s\n", kernels::backend_unavailable_reason(argv[1]));
    return 2;
  }
  try {
    gpt::GptConfig cfg;
    cfg.layers = 2;
    cfg.hidden = 64;
    cfg.heads = 4;
    cfg.seq_len = 40;  // > T: unused wpe rows must get zero gradient
    cfg.vocab = 192;
    cfg.vocab_real = 131;  // padded to a multiple of 64; 61 masked columns
    const int B = 4, T = 32, steps = 10;
    kernels::AdamWParams hp;
    hp.lr = 3e-3f;
    hp.beta1 = 0.9f;
    hp.beta2 = 0.95f;
    hp.eps = 1e-8f;
    const float weight_decay = 0.1f;

    gpt::Model model(cfg, *be);
    model.init(1234);
    const std::vector<float> initial(model.params(), model.params() + model.num_params());

    std::mt19937 rng(42);
    std::uniform_int_distribution<int> tok(0, cfg.vocab_real - 1);
    std::vector<int32_t> inputs(B * T), targets(B * T);
    for (int i = 0; i < B * T; i++) {
      inputs[i] = tok(rng);
      targets[i] = tok(rng);
    }
    targets[5] = -1;  // ignored positions
    targets[B * T - 1] = -1;

    model.zero_grad();
    const float loss = model.forward(inputs.data(), targets.data(), B, T);
    const std::vector<float> logits(model.logits(), model.logits() + (size_t)B * T * cfg.vocab);
    model.backward();

    h5::File f = h5::File::create(argv[2]);
    f.set_attr("backend", be->name);
    f.set_attr("layers", cfg.layers);
    f.set_attr("hidden", cfg.hidden);
    f.set_attr("heads", cfg.heads);
    f.set_attr("seq_len", cfg.seq_len);
    f.set_attr("vocab", cfg.vocab);
    f.set_attr("vocab_real", cfg.vocab_real);
    f.set_attr("B", B);
    f.set_attr("T", T);
    f.set_attr("loss", (double)loss);
    f.set_attr("lr", (double)hp.lr);
    f.set_attr("beta1", (double)hp.beta1);
    f.set_attr("beta2", (double)hp.beta2);
    f.set_attr("eps", (double)hp.eps);
    f.set_attr("weight_decay", (double)weight_decay);
    f.write("inputs", inputs, {(hsize_t)B, (hsize_t)T});
    f.write("targets", targets, {(hsize_t)B, (hsize_t)T});
    f.write("logits", logits, {(hsize_t)B, (hsize_t)T, (hsize_t)cfg.vocab});
    h5::Group params = f.create_group("params");
    h5::Group grads = f.create_group("grads");
    std::vector<std::string> order;
    for (const auto& t : model.tensors()) {
      std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
      params.write(t.name, std::vector<float>(initial.begin() + t.offset, initial.begin() + t.offset + t.size), dims);
      grads.write(t.name, std::vector<float>(model.grads() + t.offset, model.grads() + t.offset + t.size), dims);
      order.push_back(t.name);
    }
    f.write_strings("tensor_order", order);

    // AdamW on the same batch: loss before each update
    std::vector<float> m(model.num_params()), v(model.num_params()), losses;
    for (int s = 1; s <= steps; s++) {
      model.zero_grad();
      losses.push_back(model.forward(inputs.data(), targets.data(), B, T));
      model.backward();
      hp.step = s;
      gpt::adamw_update_ranges(*be, gpt::decay_ranges(model.tensors(), 0, model.num_params()), 0, model.params(),
                               model.grads(), m.data(), v.data(), hp, weight_decay);
    }
    losses.push_back(model.forward(inputs.data(), targets.data(), B, T));
    f.write("adamw_losses", losses);
    std::printf("%s: loss %.6f, %zu parameters, adamw losses %.5f -> %.5f\n", be->name, loss, model.num_params(),
                losses.front(), losses.back());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_parity_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
