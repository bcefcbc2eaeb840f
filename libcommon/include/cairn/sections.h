// Every config section of every tool as a typed struct (one declaration per key: cairn/config_section.h).
#pragma once
#include "cairn/sections/cluster.h"
#include "cairn/sections/data.h"
#include "cairn/sections/eval.h"
#include "cairn/sections/model.h"
#include "cairn/sections/parallel.h"
#include "cairn/sections/plan.h"
#include "cairn/sections/report.h"
#include "cairn/sections/run.h"
#include "cairn/sections/sweep.h"
#include "cairn/sections/train.h"
