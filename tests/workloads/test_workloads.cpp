#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/nn/functional/loss.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/transformercoder.h>
#include <torch/nn/modules/transformerlayer.h>
#include <torch/utils.h>

#include <algorithm>
#include <limits>
#include <map>

#include "devices/counting_allocator.h"
#include "devices/precision.h"
#include "compat/torch_compat.h"
#include "workloads/chunked_cross_entropy.h"
#include "workloads/gpt2_size.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

class EveryWorkload : public ::testing::TestWithParam<std::string> {
 protected:
  const Workload& workload() const { return WorkloadRegistry::instance().get(GetParam()); }
};

TEST_P(EveryWorkload, DataIsAPureFunctionOfTheSeed) {
  const auto a = workload().make_dataset(64, 7);
  const auto b = workload().make_dataset(64, 7);
  const auto c = workload().make_dataset(64, 8);
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
  EXPECT_TRUE(torch::equal(a.targets, b.targets));
  EXPECT_FALSE(torch::equal(a.inputs, c.inputs));
  EXPECT_FALSE(torch::equal(a.targets, c.targets));
  EXPECT_EQ(a.size(), 64);
  EXPECT_EQ(a.targets.size(0), 64);
}

TEST_P(EveryWorkload, ModelMapsABatchToALoss) {
  torch::manual_seed(1);
  auto model = workload().make_model();
  const auto data = workload().make_dataset(4, 1);
  auto loss = workload().loss(model->forward(data.inputs), data.targets);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  loss.backward();
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST_P(EveryWorkload, SameSeedSameInitialWeights) {
  torch::manual_seed(3);
  auto a = workload().make_model();
  torch::manual_seed(3);
  auto b = workload().make_model();
  const auto pa = a->parameters(), pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

TEST_P(EveryWorkload, CloneCopiesParametersAndBuffers) {
  torch::manual_seed(5);
  auto model = workload().make_model();
  {
    // Buffers away from their initial values, so a fresh instance's own cannot pass for a copy.
    torch::NoGradGuard no_grad;
    for (auto& b : model->buffers()) b.add_(3);
  }
  model->eval();
  auto copy = clone_model(*model, torch::kCPU);
  const auto pa = model->named_parameters(), pb = copy->named_parameters();
  ASSERT_EQ(pa.keys(), pb.keys());
  for (const auto& entry : pa) {
    const auto& theirs = pb[entry.key()];
    EXPECT_TRUE(torch::equal(entry.value(), theirs)) << entry.key();
    EXPECT_NE(entry.value().data_ptr(), theirs.data_ptr()) << entry.key() << ": a copy, not shared storage";
    EXPECT_TRUE(theirs.requires_grad() && theirs.is_leaf()) << entry.key() << ": trainable, no autograd history";
  }
  const auto ba = model->named_buffers(), bb = copy->named_buffers();
  ASSERT_EQ(ba.keys(), bb.keys());
  for (const auto& entry : ba) {
    EXPECT_TRUE(torch::equal(entry.value(), bb[entry.key()])) << entry.key();
    EXPECT_NE(entry.value().data_ptr(), bb[entry.key()].data_ptr()) << entry.key();
  }
  EXPECT_FALSE(copy->is_training());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : copy->parameters()) p.add_(1);
  }
  for (const auto& entry : pa) {
    EXPECT_TRUE(torch::equal(entry.value() + 1, pb[entry.key()])) << entry.key() << ": the original is untouched";
  }
}

TEST_P(EveryWorkload, Float64ConversionLeavesIntegerBuffersAndCloneKeepsEveryType) {
  torch::manual_seed(5);
  auto model = workload().make_model();
  std::map<std::string, c10::ScalarType> before;
  for (const auto& b : model->named_buffers()) before[b.key()] = b.value().scalar_type();
  set_floating_dtype(*model, torch::kFloat64);
  for (const auto& p : model->named_parameters()) EXPECT_EQ(p.value().scalar_type(), torch::kFloat64) << p.key();
  for (const auto& b : model->named_buffers()) {
    const auto expected = c10::isFloatingType(before[b.key()]) ? torch::kFloat64 : before[b.key()];
    EXPECT_EQ(b.value().scalar_type(), expected) << b.key() << ": integer buffers stay integer";
  }
  auto copy = clone_model(*model, torch::kCPU);
  for (const auto& p : copy->named_parameters()) EXPECT_EQ(p.value().scalar_type(), torch::kFloat64) << p.key();
  const auto originals = model->named_buffers();
  for (const auto& b : copy->named_buffers()) {
    EXPECT_EQ(b.value().scalar_type(), originals[b.key()].scalar_type()) << b.key();
    EXPECT_TRUE(torch::equal(b.value(), originals[b.key()])) << b.key();
  }
}

TEST_P(EveryWorkload, FactsArePositive) {
  const auto f = workload().facts();
  EXPECT_GT(f.parameters, 0);
  EXPECT_EQ(f.gradient_bytes, f.parameters * 4);  // fp32
  EXPECT_GT(f.flops_per_sample, 0);
}

// The pipeline's view (WorkloadModel::chain_length): every built-in workload is a chain of its wrap
// units, and cutting it between any two units and running the two pieces one after the other is
// its forward, bit for bit; the head's, the units' and the tail's parameters cover the model, a
// unit's in no other part (a tied weight may be the head's and the tail's).
TEST_P(EveryWorkload, ForwardIsItsChainCutAnywhere) {
  torch::manual_seed(9);
  auto model = workload().make_model();
  const std::size_t n = model->chain_length();
  ASSERT_GT(n, 0u) << model->chain_refusal();
  ASSERT_EQ(n, model->wrap_units().size());
  const auto data = workload().make_dataset(2, 1);
  torch::NoGradGuard no_grad;
  const auto whole = model->forward(data.inputs);
  EXPECT_TRUE(torch::equal(model->forward_range(data.inputs, 0, n), whole));
  for (std::size_t cut = 1; cut < n; ++cut) {
    const auto pieces = model->forward_range(model->forward_range(data.inputs, 0, cut), cut, n);
    EXPECT_TRUE(torch::equal(pieces, whole)) << "cut before unit " << cut;
  }
  // Every stage holds a unit at least: an empty range has no place for the head or the tail.
  EXPECT_THROW(model->forward_range(data.inputs, 1, 1), std::logic_error);
  EXPECT_THROW(model->forward_range(data.inputs, 0, n + 1), std::logic_error);
}

TEST_P(EveryWorkload, TheChainsPartsHoldEveryParameterAndAUnitsOnlyInIt) {
  torch::manual_seed(9);
  auto model = workload().make_model();
  std::map<const void*, int> parts;  // how many of head, units and tail use each tensor
  const auto note = [&](const std::vector<torch::Tensor>& tensors) {
    for (const auto& t : tensors) ++parts[t.unsafeGetTensorImpl()];
  };
  note(model->chain_head_parameters());
  note(model->chain_tail_parameters());
  for (const auto& unit : model->wrap_units()) {
    for (const auto& t : unit.parameters) {
      EXPECT_EQ(parts.count(t.unsafeGetTensorImpl()), 0u) << "a unit's parameter is also the head's or the tail's";
    }
    note(unit.parameters);
  }
  for (const auto& p : model->distinct_parameters()) {
    const auto it = parts.find(p.unsafeGetTensorImpl());
    ASSERT_NE(it, parts.end()) << "a parameter in no part of the chain";
    EXPECT_LE(it->second, 2);
  }
}

TEST(Workloads, Gpt2sTiedEmbeddingIsItsChainsHeadAndTail) {
  torch::manual_seed(9);
  auto model = WorkloadRegistry::instance().get("gpt2").make_model();
  const auto head = model->chain_head_parameters(), tail = model->chain_tail_parameters();
  const auto wte = head.front();
  EXPECT_TRUE(std::any_of(tail.begin(), tail.end(), [&](const torch::Tensor& t) { return t.is_same(wte); }));
}

INSTANTIATE_TEST_SUITE_P(Registered, EveryWorkload, ::testing::ValuesIn(WorkloadRegistry::instance().names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(Workloads, TheFourOfWorkloadsMdAndGpt2AreRegistered) {
  EXPECT_EQ(WorkloadRegistry::instance().names(),
            (std::vector<std::string>{"mlp", "convnet", "gpt2", "transformer", "wide-logits"}));
}

// Sets the run-wide workload settings for one test and puts back the default after it.
struct SettingsFor {
  explicit SettingsFor(WorkloadSettings s) { configure_workloads(s); }
  ~SettingsFor() { configure_workloads({}); }
};

TEST(Gpt2, IsGpt2SmallExactly) {
  const auto& gpt2 = WorkloadRegistry::instance().get("gpt2");
  // nanoGPT's GPT-2 (124M) with the output projection tied to the token embedding.
  EXPECT_EQ(gpt2.facts().parameters, 124439808);
  EXPECT_EQ(gpt2.max_sequence_length(), 1024);
  const double n = 124439808.0 - 1024 * 768;  // without the position table, as nanoGPT counts
  {
    SettingsFor cpu({false, std::nullopt, ""});
    EXPECT_EQ(gpt2.default_global_batch(), 2);
    EXPECT_EQ(gpt2.make_dataset(3, 0).inputs.sizes(), (std::vector<int64_t>{3, 32}));
    EXPECT_DOUBLE_EQ(gpt2.flops_per_sample(), 32 * (6 * n + 12.0 * 12 * 768 * 32));
  }
  {
    SettingsFor gpu({true, std::nullopt, ""});
    EXPECT_EQ(gpt2.default_global_batch(), 16);
    EXPECT_EQ(gpt2.make_dataset(1, 0).inputs.sizes(), (std::vector<int64_t>{1, 1024}));
    // Per token 6N + 12 L C T = 742M + 113M FLOPs: 0.876 TFLOP a 1024-token sequence.
    EXPECT_DOUBLE_EQ(gpt2.flops_per_sample(), 1024 * (6 * n + 12.0 * 12 * 768 * 1024));
  }
  SettingsFor short_samples({false, 5, ""});
  const auto data = gpt2.make_dataset(2, 0);
  EXPECT_EQ(data.inputs.sizes(), (std::vector<int64_t>{2, 5}));
  // Targets are the inputs shifted by one token.
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(data.inputs.index({Slice(), Slice(1, 5)}), data.targets.index({Slice(), Slice(0, 4)})));
  EXPECT_LT(data.inputs.max().item<int64_t>(), 50257);
}

TEST(Gpt2, EverySizeIsTheModelItsGeometrySays) {
  // OpenAI's four released sizes by their known parameter counts (tied output projection counted once).
  const std::vector<std::pair<std::string, std::int64_t>> released = {
      {"small", 124439808}, {"medium", 354823168}, {"large", 774030080}, {"xl", 1557611200}};
  for (const auto& [name, parameters] : released) {
    EXPECT_EQ(parse_gpt2_size(name).parameters(), parameters) << name;
  }
  const Gpt2Size custom = parse_gpt2_size("2:4:64:512");
  EXPECT_EQ(custom.layers, 2);
  EXPECT_EQ(custom.heads, 4);
  EXPECT_EQ(custom.width, 64);
  EXPECT_EQ(custom.vocab, 512);
  EXPECT_EQ(parse_gpt2_size("3:2:32").vocab, 50257);
  // The model built at a size has the parameters the formula counts, one unit a layer, and its
  // vocabulary in the data, its width in the FLOPs.
  const auto& gpt2 = WorkloadRegistry::instance().get("gpt2");
  SettingsFor tiny({false, 4, "2:4:64:512"});
  EXPECT_EQ(gpt2.facts().parameters, custom.parameters());
  EXPECT_EQ(gpt2.make_model()->wrap_units().size(), 2u);
  EXPECT_NE(gpt2.description().find("GPT-2 2:4:64:512 (<1M): vocab 512, 2 layers, 4 heads, width 64"), std::string::npos)
      << gpt2.description();
  const auto data = gpt2.make_dataset(64, 0);
  EXPECT_LT(data.inputs.max().item<int64_t>(), 512);
  EXPECT_GT(data.inputs.max().item<int64_t>(), 256);
  const double n = static_cast<double>(custom.parameters() - 1024 * 64);
  EXPECT_DOUBLE_EQ(gpt2.flops_per_sample(), 4 * (6 * n + 12.0 * 2 * 64 * 4));
  // A fresh instance (what every strategy clones into) has the same geometry.
  auto model = gpt2.make_model();
  EXPECT_EQ(model->fresh_instance()->parameters().size(), model->parameters().size());
  EXPECT_EQ(model->forward(data.inputs.slice(0, 0, 2)).sizes(), (std::vector<int64_t>{2, 4, 512}));
}

TEST(Gpt2, AttentionIsCausalAndMatchesItsDefinition) {
  // compat::causal_attention (ATen's fused kernel on 2.x) against softmax(q k^T / sqrt(d) + mask) v.
  torch::manual_seed(0);
  const auto q = torch::randn({2, 3, 7, 16}, torch::kFloat64), k = torch::randn({2, 3, 7, 16}, torch::kFloat64),
             v = torch::randn({2, 3, 7, 16}, torch::kFloat64);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / 4.0;
  scores = scores.masked_fill(torch::ones({7, 7}, torch::kBool).triu(1), -INFINITY);
  const auto expected = torch::matmul(torch::softmax(scores, -1), v);
  EXPECT_TRUE(torch::allclose(compat::causal_attention(q, k, v), expected, 1e-12, 1e-12));

  // In the model: changing the last token changes no earlier position's logits.
  torch::manual_seed(1);
  const auto model = WorkloadRegistry::instance().get("gpt2").make_model();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 50257, {1, 6}, torch::kInt64);
  const auto before = model->forward(tokens);
  tokens.index_put_({0, 5}, (tokens.index({0, 5}) + 1) % 50257);
  const auto after = model->forward(tokens);
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(before.index({Slice(), Slice(0, 5)}), after.index({Slice(), Slice(0, 5)})));
  EXPECT_FALSE(torch::equal(before.index({Slice(), 5}), after.index({Slice(), 5})));
}

TEST(Workloads, MlpMatchesItsFixedDefinition) {
  const auto& mlp = WorkloadRegistry::instance().get("mlp");
  const auto f = mlp.facts();
  // 784*1024+1024 + 2*(1024*1024+1024) + 1024*10+10
  EXPECT_EQ(f.parameters, 2913290);
  EXPECT_NEAR(f.flops_per_sample, 17.46e6, 0.01e6);
  EXPECT_EQ(mlp.default_global_batch(), 128);
  const auto data = mlp.make_dataset(4096, 0);
  EXPECT_EQ(data.inputs.sizes(), (std::vector<int64_t>{4096, 784}));
  EXPECT_NEAR(data.inputs.mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(data.inputs.std().item<double>(), 1.0, 0.01);
  EXPECT_EQ(data.targets.min().item<int64_t>(), 0);
  EXPECT_EQ(data.targets.max().item<int64_t>(), 9);
}

// transformer runs LibTorch's TransformerEncoderLayer written out as the same function, so that tp
// can split its projections: forward, and every parameter's gradient, must be what the layers' own
// forward gives, bit for bit, in float32 and float64.
TEST(Workloads, TransformersWrittenOutLayersAreLibTorchsEncoderLayers) {
  const auto& workload = WorkloadRegistry::instance().get("transformer");
  const auto tokens = workload.make_dataset(3, 11).inputs;
  for (const auto dtype : {torch::kFloat, torch::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(5);
    const auto model = workload.make_model();
    set_floating_dtype(*model, dtype);
    const auto reference = clone_model(*model, torch::kCPU);
    model->forward(tokens).square().sum().backward();

    // The same model through its modules' own forward.
    std::map<std::string, std::shared_ptr<torch::nn::Module>> part;
    for (const auto& child : reference->named_children()) part[child.key()] = child.value();
    auto embed = [&](const char* name, const torch::Tensor& ids) {
      return part.at(name)->as<torch::nn::EmbeddingImpl>()->forward(ids);
    };
    auto h = (embed("tokens", tokens) + embed("positions", torch::arange(tokens.size(1))).unsqueeze(0)).transpose(0, 1);
    const auto seq = h.size(0);
    const auto mask = torch::full({seq, seq}, -std::numeric_limits<float>::infinity(), h.options()).triu(1);
    auto* encoder = part.at("encoder")->as<torch::nn::TransformerEncoderImpl>();
    for (std::size_t i = 0; i < encoder->layers->size(); ++i) {
      h = encoder->layers->at<torch::nn::TransformerEncoderLayerImpl>(i).forward(h, mask);
    }
    const auto logits = part.at("head")->as<torch::nn::LinearImpl>()->forward(h.transpose(0, 1));
    logits.square().sum().backward();

    EXPECT_TRUE(torch::equal(model->forward(tokens), logits));
    const auto ours = model->named_parameters(), theirs = reference->named_parameters();
    for (const auto& p : ours) {
      SCOPED_TRACE(p.key());
      ASSERT_TRUE(p.value().grad().defined());
      EXPECT_TRUE(torch::equal(p.value().grad(), theirs[p.key()].grad()));
    }
  }
}

// transformer runs its head with its loss (call_output_loss, so that tp can split the head by
// vocabulary): without hooks, forward's logits then the workload's loss, the same bits.
TEST(Workloads, TransformersForwardLossIsItsLossOfForwardsLogits) {
  const auto& transformer = WorkloadRegistry::instance().get("transformer");
  const auto data = transformer.make_dataset(3, 1);
  torch::manual_seed(1);
  auto model = transformer.make_model();
  EXPECT_TRUE(torch::equal(transformer.forward_loss(*model, data.inputs, data.targets),
                           transformer.loss(model->forward(data.inputs), data.targets)));
}

TEST(TensorParallelPlan, AVocabularySplitsIntoSharesThatDifferByARowAtMostAndNeedsARowARank) {
  // GPT-2's 50257 over 4: 12565, then 12564 three times, end to end.
  std::int64_t next = 0;
  for (int r = 0; r < 4; ++r) {
    const auto share = vocabulary_share(50257, 4, r);
    EXPECT_EQ(share.first, next) << "rank " << r;
    EXPECT_EQ(share.count, r == 0 ? 12565 : 12564) << "rank " << r;
    next += share.count;
  }
  EXPECT_EQ(next, 50257);
  EXPECT_EQ(vocabulary_share(512, 4, 3).first, 384);
  EXPECT_EQ(vocabulary_share(512, 4, 3).count, 128);
  const TensorParallelLayerShape table{"wte", TensorParallelSplit::Vocabulary, 64, 509};
  EXPECT_EQ(table.split_features(), 509);
  EXPECT_EQ(table.why_not_split(3), "");
  EXPECT_EQ(TensorParallelLayerShape({"tiny", TensorParallelSplit::Vocabulary, 64, 2}).why_not_split(3),
            "tiny's vocabulary of 2 does not give each of 3 ranks a row");
  EXPECT_STREQ(to_string(TensorParallelSplit::Vocabulary), "vocabulary");
}

TEST(Workloads, UnknownNameIsAUsageError) {
  EXPECT_THROW(WorkloadRegistry::instance().get("resnet"), std::exception);
}

}  // namespace
}  // namespace ddpbench

namespace ddpbench {
namespace {

// ---- the chunked output projection + cross-entropy (gpt2's fused loss) -----------------------

struct LossAndGradients {
  torch::Tensor loss, grad_hidden, grad_weight;
};

template <typename LossFn>
LossAndGradients loss_and_gradients(const torch::Tensor& hidden, const torch::Tensor& weight, LossFn loss_fn) {
  auto h = hidden.detach().clone().requires_grad_(true);
  auto w = weight.detach().clone().requires_grad_(true);
  auto loss = loss_fn(h, w);
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

torch::Tensor whole_logits_loss(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(torch::matmul(h, w.t()).to(torch::kFloat), targets);
}

TEST(ChunkedCrossEntropy, MatchesCrossEntropyOfTheWholeLogitsAndItsGradients) {
  for (const auto dtype : {torch::kDouble, torch::kFloat}) {
    torch::manual_seed(5);
    const auto hidden = torch::randn({10, 6}, torch::dtype(dtype));
    const auto weight = torch::randn({13, 6}, torch::dtype(dtype));
    const auto targets = torch::randint(0, 13, {10}, torch::kLong);
    const auto whole = loss_and_gradients(hidden, weight, [&](auto& h, auto& w) {
      return torch::nn::functional::cross_entropy(torch::matmul(h, w.t()), targets);
    });
    const double tolerance = dtype == torch::kDouble ? 1e-12 : 1e-5;
    for (const std::int64_t chunk : {1, 3, 7, 10, 64}) {  // single rows, uneven chunks, one chunk, more than the rows
      const auto chunked = loss_and_gradients(hidden, weight, [&](auto& h, auto& w) {
        return chunked_linear_cross_entropy(h, w, targets, chunk);
      });
      EXPECT_NEAR(chunked.loss.item<double>(), whole.loss.item<double>(), tolerance) << "chunk " << chunk;
      EXPECT_TRUE(torch::allclose(chunked.grad_hidden, whole.grad_hidden, tolerance, tolerance)) << "chunk " << chunk;
      EXPECT_TRUE(torch::allclose(chunked.grad_weight, whole.grad_weight, tolerance, tolerance)) << "chunk " << chunk;
      EXPECT_EQ(chunked.grad_hidden.scalar_type(), dtype);
      EXPECT_EQ(chunked.grad_weight.scalar_type(), dtype);
    }
  }
}

TEST(ChunkedCrossEntropy, WithoutGradientsGivesTheSameLossAndNoGraphAndAFrozenWeightStillTrainsTheHiddenStates) {
  torch::manual_seed(8);
  const auto hidden = torch::randn({9, 4}, torch::kDouble).requires_grad_();
  const auto weight = torch::randn({7, 4}, torch::kDouble);  // frozen: no gradient asked of it
  const auto targets = torch::randint(0, 7, {9}, torch::kLong);
  const auto whole = torch::nn::functional::cross_entropy(torch::matmul(hidden, weight.t()), targets);
  const auto grad_whole = torch::autograd::grad({whole}, {hidden})[0];
  torch::Tensor without;
  {
    torch::NoGradGuard no_grad;  // evaluation: forward takes the loss alone
    without = chunked_linear_cross_entropy(hidden, weight, targets, 4);
  }
  EXPECT_FALSE(without.requires_grad());
  EXPECT_NEAR(without.item<double>(), whole.item<double>(), 1e-12);
  const auto with = chunked_linear_cross_entropy(hidden, weight, targets, 4);
  EXPECT_NEAR(with.item<double>(), whole.item<double>(), 1e-12);
  EXPECT_TRUE(torch::allclose(torch::autograd::grad({with * 3.0}, {hidden})[0], grad_whole * 3.0, 1e-12, 1e-12))
      << "backward scales forward's gradient by the incoming one";
}

TEST(ChunkedCrossEntropy, UnderBf16AutocastMatchesTheWholeLogitsPathWithinBf16) {
  torch::manual_seed(6);
  const auto hidden = torch::randn({24, 32});
  const auto weight = torch::randn({50, 32}) * 0.1;
  const auto targets = torch::randint(0, 50, {24}, torch::kLong);
  auto under_autocast = [&](auto fn) {
    return loss_and_gradients(hidden, weight, [&](auto& h, auto& w) {
      AutocastScope autocast(Precision::Bf16, c10::Device(c10::kCPU));
      return fn(h, w);
    });
  };
  const auto whole = under_autocast([&](auto& h, auto& w) { return whole_logits_loss(h, w, targets); });
  const auto chunked = under_autocast([&](auto& h, auto& w) { return chunked_linear_cross_entropy(h, w, targets, 5); });
  EXPECT_EQ(chunked.loss.scalar_type(), torch::kFloat);
  EXPECT_NEAR(chunked.loss.item<double>(), whole.loss.item<double>(), 1e-2);
  EXPECT_TRUE(torch::allclose(chunked.grad_hidden, whole.grad_hidden, 2e-2, 2e-3));
  EXPECT_TRUE(torch::allclose(chunked.grad_weight, whole.grad_weight, 2e-2, 2e-3));
}

TEST(ChunkedCrossEntropy, NeverHoldsTheWholeLogits) {
  CpuMemoryCounter::install();
  constexpr std::int64_t rows = 512, vocabulary = 8192, width = 16;
  constexpr std::int64_t logits_bytes = rows * vocabulary * 4;  // 16 MiB
  torch::manual_seed(7);
  const auto hidden = torch::randn({rows, width});
  const auto weight = torch::randn({vocabulary, width}) * 0.1;
  const auto targets = torch::randint(0, vocabulary, {rows}, torch::kLong);
  auto peak_of = [&](auto fn) {
    CpuMemoryCounter::DeviceScope scope(0);
    CpuMemoryCounter::reset_peaks();
    const auto before = CpuMemoryCounter::current_bytes(0);
    loss_and_gradients(hidden, weight, fn);
    return CpuMemoryCounter::peak_bytes(0) - before;
  };
  const auto whole = peak_of([&](auto& h, auto& w) { return whole_logits_loss(h, w, targets); });
  const auto chunked = peak_of([&](auto& h, auto& w) { return chunked_linear_cross_entropy(h, w, targets, 32); });
  EXPECT_GE(whole, logits_bytes) << "the whole-logits path holds the logits (the test's premise)";
  EXPECT_LT(chunked, logits_bytes / 4) << "whole-logits path " << whole << " B, chunked " << chunked << " B";
}

TEST(Gpt2, FusedOutputLossGivesForwardThenLossAndItsGradients) {
  // GPT-2's code at a test's geometry: the same fused path as at 124M, where this took 9 s.
  SettingsFor short_samples({false, 4, "2:4:64:512"});
  const auto& gpt2 = WorkloadRegistry::instance().get("gpt2");
  const auto data = gpt2.make_dataset(2, 1);
  torch::manual_seed(1);
  auto model = gpt2.make_model();
  auto gradients = [&](bool fused) {
    model->zero_grad();
    auto loss = fused ? gpt2.forward_loss(*model, data.inputs, data.targets)
                      : gpt2.loss(model->forward(data.inputs), data.targets);
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss.item<double>(), grads);
  };
  const auto [plain_loss, plain] = gradients(false);
  const auto [fused_loss, fused] = gradients(true);
  EXPECT_NEAR(fused_loss, plain_loss, 1e-5 * plain_loss);
  ASSERT_EQ(fused.size(), plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::allclose(fused[i], plain[i], 1e-3, 1e-6)) << "parameter " << i;
  }
}

TEST(Gpt2, PlainLossIsForwardsWholeLogitsThenTheLossAndTheDescriptionSaysWhich) {
  const auto& gpt2 = WorkloadRegistry::instance().get("gpt2");
  const auto data = gpt2.make_dataset(2, 1);
  torch::manual_seed(1);
  auto model = gpt2.make_model();
  // Which path made a loss, by its autograd node: at this size the two give the same bits (one
  // chunk), so only the graph tells them apart.
  const auto made_by_the_fused_path = [&] {
    const auto loss = gpt2.forward_loss(*model, data.inputs, data.targets);
    return loss.grad_fn()->name().find("ChunkedLinearCrossEntropy") != std::string::npos;
  };
  {
    SettingsFor fused({false, 4, "2:4:64:512"});
    EXPECT_NE(gpt2.description().find("output projection and loss fused over chunks of"), std::string::npos)
        << gpt2.description();
    EXPECT_TRUE(made_by_the_fused_path());
  }
  SettingsFor plain({false, 4, "2:4:64:512", /*gpt2_plain_loss=*/true});
  EXPECT_NE(gpt2.description().find("loss on the whole logits (--gpt2-loss plain)"), std::string::npos)
      << gpt2.description();
  EXPECT_FALSE(made_by_the_fused_path());
  // Forward's logits, then the workload's loss: the same bits.
  EXPECT_TRUE(torch::equal(gpt2.forward_loss(*model, data.inputs, data.targets),
                           gpt2.loss(model->forward(data.inputs), data.targets)));
}

}  // namespace
}  // namespace ddpbench
