// Questions and answers between waiting ranks, and the timeout report
// (peer_probe.h).
#include "dist/peer_probe.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace docmatch::dist {
namespace {

constexpr int kQuestion = 1, kAnswer = 2;

struct Answer {
  int64_t number = 0;
  char what[240] = {};
};

// The node a rank runs on as the scheduler names it (Slurm's node name, which
// several nodes sharing one host name still tell apart), else the host name.
std::string NodeName() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm != nullptr && *slurm != '\0') return slurm;
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return std::string(name, static_cast<size_t>(length));
}

double Seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

// How long a timed-out rank waits for its peers' answers.
std::chrono::milliseconds SurveyGrace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(1000), std::chrono::milliseconds(10000));
}

}  // namespace

PrivateComm::PrivateComm(MPI_Comm base) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) throw std::logic_error("[dist] MPI is not initialised: create a dist::MpiRuntime first");
  MPI_Comm_dup(base, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

PrivateComm::~PrivateComm() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

PeerProbe::PeerProbe(MPI_Comm base) : comm_(base), rank_(comm_.rank()), size_(comm_.size()) {
  constexpr int kHostBytes = 64;
  std::string own = NodeName().substr(0, kHostBytes - 1);
  own.resize(kHostBytes, '\0');
  std::vector<char> all(static_cast<size_t>(kHostBytes) * size_);
  MPI_Allgather(own.data(), kHostBytes, MPI_CHAR, all.data(), kHostBytes, MPI_CHAR, comm_.get());
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + static_cast<size_t>(r) * kHostBytes);
}

std::string PeerProbe::Name(int rank) const {
  return "rank " + std::to_string(rank) + " (host " + hosts_.at(static_cast<size_t>(rank)) + ")";
}

PeerProbe::~PeerProbe() = default;

Pending PeerProbe::Start(std::string what, std::chrono::milliseconds timeout) {
  return {std::move(what), ++started_, timeout, shared_from_this()};
}

void PeerProbe::Answer(int64_t number, const std::string& what) {
  for (;;) {
    // Matched probe and receive: two threads waiting at once cannot take
    // each other's question.
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kQuestion, comm_.get(), &found, &message, &status);
    if (!found) return;
    int64_t asked = 0;
    MPI_Mrecv(&asked, 1, MPI_INT64_T, &message, MPI_STATUS_IGNORE);
    struct Answer answer;
    answer.number = number;
    std::strncpy(answer.what, what.c_str(), sizeof(answer.what) - 1);
    // Small enough to go eagerly: returns without the asker's help.
    MPI_Send(&answer, sizeof(answer), MPI_BYTE, status.MPI_SOURCE, kAnswer, comm_.get());
  }
}

std::string PeerProbe::Survey(int64_t number, const std::string& what, std::chrono::milliseconds grace) {
  question_ = number;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    // Never completed for a stopped peer; the job aborts right after.
    MPI_Request request;
    MPI_Isend(&question_, 1, MPI_INT64_T, peer, kQuestion, comm_.get(), &request);
    MPI_Request_free(&request);
  }
  std::map<int, struct Answer> answers;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (static_cast<int>(answers.size()) < size_ - 1 && std::chrono::steady_clock::now() < deadline) {
    Answer(number, what);
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kAnswer, comm_.get(), &found, &message, &status);
    if (found) {
      struct Answer answer;
      MPI_Mrecv(&answer, sizeof(answer), MPI_BYTE, &message, MPI_STATUS_IGNORE);
      answers[status.MPI_SOURCE] = answer;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::vector<int> silent, same;
  std::ostringstream elsewhere;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto found = answers.find(peer);
    if (found == answers.end()) {
      silent.push_back(peer);
    } else if (found->second.number == number) {
      same.push_back(peer);
    } else {
      elsewhere << " R" << Name(peer).substr(1) << " waits in collective #" << found->second.number << " ("
                << found->second.what << "): the ranks disagree on the order of collectives.";
    }
  }
  auto list = [this](const std::vector<int>& ranks) {
    std::ostringstream s;
    s << (ranks.size() == 1 ? "" : "ranks ");
    for (size_t i = 0; i < ranks.size(); ++i) {
      s << (i ? ", " : "") << (ranks.size() == 1 ? Name(ranks[i]) : Name(ranks[i]).substr(5));
    }
    return s.str();
  };
  std::ostringstream report;
  if (!silent.empty()) {
    std::string who = list(silent);
    who[0] = 'R';
    report << " " << who << " did not answer within " << Seconds(grace)
           << " s: stopped, hung, or busy outside collectives.";
  }
  if (!same.empty()) {
    std::string who = list(same);
    who[0] = 'R';
    report << " " << who << (same.size() == 1 ? " waits" : " wait") << " in the same collective.";
  }
  report << elsewhere.str();
  return report.str();
}

bool PollBackoff::hot() const { return std::chrono::steady_clock::now() - start_ < hot_for_; }

void PollBackoff::Pause() {
  if (hot()) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(sleep_);
  sleep_ = std::min(longest_, sleep_ * 2);
}

void WaitOrAbort(const Pending& pending, const std::function<bool()>& done, PollBackoff backoff) {
  // Questions come only from a peer that timed out, so answering them can
  // wait until the collective is no longer about to complete (5 ms, however
  // `backoff` polls): a collective that completes soon costs no MPI call.
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + pending.timeout, answer_from = start + std::chrono::milliseconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= answer_from) pending.probe->Answer(pending.number, pending.what);
    if (std::chrono::steady_clock::now() > deadline) {
      const std::string peers = pending.probe->Survey(pending.number, pending.what, SurveyGrace(pending.timeout));
      LOG(ERROR) << "[dist] " << pending.probe->Name(pending.probe->rank()) << ": " << pending.what << " (collective #"
                 << pending.number << ") did not complete within " << Seconds(pending.timeout) << " s." << peers
                 << " Aborting the job (--collective-timeout sets the limit).";
      google::FlushLogFiles(google::GLOG_INFO);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    backoff.Pause();
  }
}

}  // namespace docmatch::dist
