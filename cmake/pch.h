// Precompiled for every target: the LibTorch headers nearly every translation unit needs.
#pragma once
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>
