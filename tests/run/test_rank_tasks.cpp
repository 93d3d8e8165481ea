// The task ddpbench's launcher hands its rank processes, encoded and decoded.
#include <gtest/gtest.h>

#include "base/errors.h"
#include "run/rank_tasks.h"

namespace ddpbench {
namespace {

TEST(RankTask, EncodesAndDecodesWithOrWithoutTracing) {
  for (const RankTask& task : {RankTask{RankTask::Kind::Parity, "mlp/ddp/world:2", 0, false},
                               RankTask{RankTask::Kind::Repetition, "mlp/ddp/world:2", 3, false},
                               RankTask{RankTask::Kind::Repetition, "mlp/ddp/world:2", 4, true}}) {
    const RankTask back = RankTask::decode(task.encode());
    EXPECT_EQ(back.kind, task.kind) << task.encode();
    EXPECT_EQ(back.case_name, task.case_name) << task.encode();
    EXPECT_EQ(back.repetition, task.repetition) << task.encode();
    EXPECT_EQ(back.trace, task.trace) << task.encode();
  }
  EXPECT_THROW(RankTask::decode("repetition 1 mlp/ddp/world:2 loud"), UsageError);
  EXPECT_THROW(RankTask::decode("repetition 1"), UsageError);
  EXPECT_THROW(RankTask::decode("sometimes mlp/ddp/world:2"), UsageError);
}

}  // namespace
}  // namespace ddpbench
