// A job that goes wrong on purpose, for the failure-rule tests:
//   failure_probe throw R   rank R throws while the others wait in a collective
//   failure_probe stall R   rank R stops calling collectives; the others time out
// Either way every rank must exit non-zero within seconds, with the message.
#include <glog/logging.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "dist/mpi_communicator.h"
#include "dist/runtime.h"

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  docmatch::dist::MpiRuntime mpi(&argc, &argv);
  docmatch::dist::SetUpRankLogging(mpi.rank());
  const std::string mode = argc > 1 ? argv[1] : "throw";
  const int culprit = argc > 2 ? std::stoi(argv[2]) : 1;
  return docmatch::dist::RunOnAllRanks([&] {
    docmatch::dist::MpiCommunicator comm;
    comm.set_timeout(std::chrono::milliseconds(1500));
    comm.Barrier();
    if (comm.rank() == culprit) {
      if (mode == "throw") throw std::runtime_error("injected failure on rank " + std::to_string(culprit));
      std::this_thread::sleep_for(std::chrono::seconds(60));  // stall: never joins the all-reduce
    }
    torch::Tensor t = torch::ones({8});
    comm.AllReduce(t);
    return 0;
  });
}
