//! `RL.TESTING.PANIC`: a command that panics, registered only when the module is loaded
//! with the argument `enable-testing-commands`, so that the tests can prove on a real
//! server that a panicking handler answers an error instead of killing the server.

use super::command_handler;

command_handler!(rl_testing_panic, |_, _| panic!(
    "RL.TESTING.PANIC was called"
));
