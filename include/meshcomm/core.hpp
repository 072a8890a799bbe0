// Everything a host program needs to set up meshcomm channels.
#pragma once

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/communicator.hpp"
#include "meshcomm/connection.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/memory_channel.hpp"
#include "meshcomm/port_channel.hpp"
#include "meshcomm/proxy.hpp"
#include "meshcomm/registered_memory.hpp"
#include "meshcomm/semaphore.hpp"
