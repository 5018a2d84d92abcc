// SPDX-License-Identifier: MIT OR Apache-2.0
// The layers' levers: the kernel-selection switches the selectors read (docs/levers.md, "Kernel
// selection"). The layers declare them, not the runtime. A program calls register_levers() once at
// start-up, before validate_levers() and unknown_levers(), so `metrale levers`, start-up validation
// and "did you mean" cover them; every layers entry point that reads one registers them itself
// too, so a program that forgets still works. Idempotent and thread-safe.
#pragma once

namespace metrale::layers {

void register_levers();

}  // namespace metrale::layers
