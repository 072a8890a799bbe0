// Device event traces (include/meshcomm/device/trace.hpp, src/core/device_trace.hpp): the packing of an
// event's second word, the file's JSON (fields, events in claim order, dropped count), the executor's event
// names, and that no buffer is made (nothing allocated) while MESHCOMM_TRACE is unset.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/device_trace.hpp"
#include "plan/device_plan.hpp"
#include "plan/plan_format.hpp"
#include "scoped_env.hpp"

namespace meshcomm {
namespace {

TEST(DeviceTrace, JsonUnpacksEachEventsFields) {
  const std::vector<uint64_t> events = {
      1000, DeviceTrace::pack(7, 3, 2, 0),    // call 7, block 3, event 2
      1250, DeviceTrace::pack(7, 3, 9, 200),  // an op event, arg 200
      1300, DeviceTrace::pack(0xfffffffeu, 65535, 255, 255),
  };
  const auto doc = nlohmann::json::parse(
      deviceTraceJson("plan-x", 1, {"start", "prologue", "staged"}, events.data(), 3, 8));
  EXPECT_EQ(doc["component"], "plan-x");
  EXPECT_EQ(doc["rank"], 1);
  EXPECT_EQ(doc["fields"], nlohmann::json({"time_ns", "call", "block", "event", "arg"}));
  EXPECT_EQ(doc["event_names"], nlohmann::json({"start", "prologue", "staged"}));
  ASSERT_EQ(doc["events"].size(), 3u);
  EXPECT_EQ(doc["events"][0], nlohmann::json({1000, 7, 3, 2, 0}));
  EXPECT_EQ(doc["events"][1], nlohmann::json({1250, 7, 3, 9, 200}));
  EXPECT_EQ(doc["events"][2], nlohmann::json({1300, 0xfffffffeull, 65535, 255, 255}));
  EXPECT_EQ(doc["claimed"], 3);
  EXPECT_EQ(doc["dropped"], 0);
}

TEST(DeviceTrace, EventsPastTheCapacityAreCountedAsDropped) {
  const std::vector<uint64_t> events = {10, DeviceTrace::pack(1, 0, 0, 0), 20, DeviceTrace::pack(1, 0, 3, 0)};
  const auto doc = nlohmann::json::parse(deviceTraceJson("c", 0, {}, events.data(), 5, 2));
  EXPECT_EQ(doc["events"].size(), 2u);
  EXPECT_EQ(doc["claimed"], 5);
  EXPECT_EQ(doc["dropped"], 3);
}

TEST(DeviceTrace, ExecutorEventNamesFollowTheCodes) {
  const std::vector<std::string> names = plan::detail::traceEventNames();
  EXPECT_EQ(names.at(static_cast<size_t>(plan::PlanTraceEvent::Start)), "start");
  EXPECT_EQ(names.at(static_cast<size_t>(plan::PlanTraceEvent::Prologue)), "prologue");
  EXPECT_EQ(names.at(static_cast<size_t>(plan::PlanTraceEvent::Staged)), "staged");
  EXPECT_EQ(names.at(static_cast<size_t>(plan::PlanTraceEvent::End)), "end");
  EXPECT_EQ(names.at(plan::kFirstOpEvent + static_cast<size_t>(plan::OpKind::PutPackets)), "op:put_packets");
  EXPECT_EQ(names.at(plan::kFirstOpEvent + static_cast<size_t>(plan::OpKind::Barrier)), "op:barrier");
  EXPECT_LE(names.size(), 256u);  // an event code is 8 bits
}

TEST(DeviceTrace, OffWithoutTheVariable) {
  test::ScopedEnv unset("MESHCOMM_TRACE", nullptr);
  EXPECT_EQ(DeviceTraceBuffer::fromEnvironment("plan-x", 0, {"start"}), nullptr);
}

TEST(DeviceTrace, BadCapacityIsRefusedNamingTheVariable) {
  test::ScopedEnv on("MESHCOMM_TRACE", "/tmp/meshcomm-trace-test");
  test::ScopedEnv bad("MESHCOMM_TRACE_EVENTS", "0");
  try {
    DeviceTraceBuffer::fromEnvironment("plan-x", 2, {"start"});
    FAIL() << "MESHCOMM_TRACE_EVENTS=0 was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2: MESHCOMM_TRACE_EVENTS=0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshcomm
