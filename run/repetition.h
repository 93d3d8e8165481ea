#pragma once
// One repetition of a case in this process, measured: a strategy set up afresh from the run's seed,
// --warmup untimed steps, then --steps steps, each timed on the host's steady clock around the
// whole step (after synchronizing the device), with the phases the strategy marks, the process's
// CPU time, peak memory per device from the end of warm-up, and every step's loss.
#include "records/results.h"
#include "run/case_builder.h"
#include "run/step_listener.h"

namespace ddpbench {

// Throws StopRequested at a step boundary after request_stop(), CaseFailure on a loss that is not
// finite, and whatever the strategy throws.
RepetitionRecord measure_repetition(CaseBuilder& builder, StepListener& listener, const CaseRecord& record,
                                    int index);

}  // namespace ddpbench
