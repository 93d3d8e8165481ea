#pragma once
// The parity check, nccl-tests' #wrong column for training: a case trains --parity-steps untimed
// steps from the same initial weights on the same batches as `single`, and its parameters must
// match single's within --parity-tolerance (asynchronous strategies: compared by loss instead).
#include <map>
#include <string>
#include <vector>

#include "records/results.h"
#include "run/case_builder.h"
#include "run/step_listener.h"

namespace ddpbench {

class ParityCheck {
 public:
  // Keeps references to both; `builder` says which process group this process is a rank of.
  ParityCheck(CaseBuilder& builder, StepListener& listener) : builder_(builder), listener_(listener) {}

  // Trains `spec` (and, once per workload, single as the reference) and compares the parameters.
  // In a process group only rank 0 compares; the other ranks only train, and return the loss.
  ParityRecord measure(const CaseSpec& spec);

 private:
  struct Reference {
    std::vector<torch::Tensor> parameters;  // CPU copies of the trained parameters
    double final_loss = 0;
    std::string failed;  // the float64 pass could not train the model: why, in one line
  };
  // train_untimed, where a failure of a float64 pass (a model that casts to float32 itself, an op
  // without a float64 kernel) is the model's, not the strategy's: said in `failed`, not thrown.
  Reference train_or_say_why(const CaseSpec& spec, int steps);
  // Trains `steps` steps without timing; returns trained parameters and the last loss.
  Reference train_untimed(const CaseSpec& spec, int steps);

  CaseBuilder& builder_;
  StepListener& listener_;
  std::map<std::string, Reference> references_;  // single's, per workload
};

// Sets record.parity from `parity`, with the note that explains an expected difference, and marks
// the case failed where the difference is not expected. `sync_bn`: --sync-bn (BatchNorm statistics
// over the global batch in multi-process strategies).
void judge_parity(CaseRecord& record, const ParityRecord& parity, bool sync_bn);

}  // namespace ddpbench
