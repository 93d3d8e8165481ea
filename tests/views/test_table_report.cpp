// The terminal table as a view of run records: what it says of noise, precision and statuses.
#include <gtest/gtest.h>

#include "records/results.h"
#include "views/table_report.h"

namespace ddpbench {
namespace {

// A measured case whose repetitions' mean step times are `means` (seconds).
CaseRecord measured_case(const std::string& strategy, int world, const std::vector<double>& means) {
  CaseRecord c;
  c.spec = {"mlp", strategy, world, 128};
  for (size_t i = 0; i < means.size(); ++i) {
    RepetitionRecord r;
    r.index = static_cast<int>(i);
    r.step_seconds = {means[i], means[i]};
    c.repetitions.push_back(r);
  }
  return c;
}

TEST(TableReport, NamesANoisyCaseFarAboveTheNoiseFloorAndMarksUnresolvedOnes) {
  RunRecord record;
  record.settings.max_cv = 0.05;
  record.settings.target_precision = 0.03;
  record.settings.max_time_seconds = 20;
  record.cases.push_back(measured_case("single", 1, {0.100, 0.101, 0.099}));
  CaseRecord ddp = measured_case("ddp", 2, {0.080, 0.100, 0.120});
  ddp.noisy = true;
  ddp.unresolved = true;
  ddp.achieved_precision = 0.25;
  record.cases.push_back(ddp);
  set_noise_floor(record);
  const std::string table = format_table(record);
  EXPECT_NE(table.find("mlp/ddp/world:2: its repetitions vary 20.0x as much as single's (the machine's noise floor "
                       "here): the spread is the case's own, not the machine's"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("25.0%!"), std::string::npos) << table;
  EXPECT_NE(table.find("! unresolved: --max-time 20 s ran out before the lower-quartile step was within +-3%"), std::string::npos)
      << table;
}

TEST(TableReport, ACaseNotReachedSaysSoAndWhy) {
  RunRecord record;
  record.cases.push_back(measured_case("single", 1, {0.1, 0.1}));
  CaseRecord not_run;
  not_run.spec = {"mlp", "dp", 2, 128};
  not_run.status = CaseStatus::NotRun;
  not_run.reason = "not run: the run was interrupted first";
  record.cases.push_back(not_run);
  record.interruption = "interrupted by a signal; measured repetitions are kept";
  const std::string table = format_table(record);
  EXPECT_NE(table.find("mlp/dp/world:2      not_run"), std::string::npos) << table;
  EXPECT_NE(table.find("mlp/dp/world:2: not run: the run was interrupted first"), std::string::npos) << table;
  EXPECT_EQ(table.find("unresolved"), std::string::npos) << table;
}

}  // namespace
}  // namespace ddpbench
