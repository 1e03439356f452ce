// batch_cursor.cuh: where a training step's batch lies, kept on the device (stages 11 and 13).
// cuda/batch_cursor.py writes it where the next batch lies elsewhere; the kernels that read the
// batch move it past the rows they read, so that a graph replayed on consecutive batches of one
// array needs nothing from the host between steps but its launch.
#pragma once

struct BatchCursor {
    const float* x;       // rows x inputs
    const float* target;  // rows x outputs
};
