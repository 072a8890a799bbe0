// Everything a user kernel needs to drive meshcomm channels from the GPU.
#pragma once

#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/comm_device.hpp"
#include "meshcomm/device/copy.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/fifo_device.hpp"
#include "meshcomm/device/memory_channel_device.hpp"
#include "meshcomm/device/packet.hpp"
#include "meshcomm/device/port_channel_device.hpp"
#include "meshcomm/device/semaphore_device.hpp"
