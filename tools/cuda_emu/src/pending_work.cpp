// The registry of work streams run beside the host (runtime_state.h: PendingWork). Kernels and
// copies run when they are called; only the NCCL stand-in's collectives are left in flight.
#include <algorithm>
#include <map>
#include <mutex>

#include "runtime_state.h"

namespace emu::detail {
namespace {

std::mutex g_mutex;
std::map<cudaStream_t, PendingList> g_pending;

}  // namespace

void queue_pending(cudaStream_t s, std::shared_ptr<PendingWork> work) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_pending[s].push_back(std::move(work));
}

PendingList pending_on(cudaStream_t s, bool every) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  PendingList out;
  for (auto it = g_pending.begin(); it != g_pending.end();) {
    PendingList& list = it->second;
    std::erase_if(list, [](const std::shared_ptr<PendingWork>& w) { return w->finished(); });
    if (every || it->first == s) out.insert(out.end(), list.begin(), list.end());
    it = list.empty() ? g_pending.erase(it) : std::next(it);
  }
  return out;
}

bool all_finished(const PendingList& work) {
  return std::all_of(work.begin(), work.end(),
                     [](const std::shared_ptr<PendingWork>& w) { return w->finished(); });
}

void finish_all(const PendingList& work) {
  for (const std::shared_ptr<PendingWork>& w : work) w->finish();
}

}  // namespace emu::detail
