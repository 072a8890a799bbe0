// The built-in algorithm selection table (JSON, the format of docs/collectives.md).
#pragma once

namespace meshcomm {

const char* defaultSelectionTable();

}  // namespace meshcomm
