// The trainer's framework pieces that need no LibTorch (framework_test.cpp tests them):
// the command line, the rate control that holds the replay ratio, the design-space
// exploration of the paper's equation 5, the actors' native policy (a small MLP evaluated
// in plain C++ from a parameter-server snapshot), the run statistics, and the actor
// processes of --processes.
#ifndef KARY_TRAINER_FRAMEWORK_HPP
#define KARY_TRAINER_FRAMEWORK_HPP

#include "equation5.hpp"
#include "options.hpp"
#include "policy.hpp"
#include "processes.hpp"
#include "rate_control.hpp"
#include "stats.hpp"

#endif  // KARY_TRAINER_FRAMEWORK_HPP
