//! `RL.TESTING.PANIC`: a command that panics, registered only when the module is loaded
//! with the argument `enable-testing-commands`, so that the tests can prove on a real
//! server that a panicking handler answers an error instead of killing the server.
//! `RL.TESTING.PANIC-IN-SAVE` makes the next save of the policies (`aux_save`) panic, to
//! prove the same of that callback.

use super::command_handler;

command_handler!(rl_testing_panic, |_, _| panic!(
    "RL.TESTING.PANIC was called"
));

command_handler!(rl_testing_panic_in_save, |ctx, _| {
    crate::policy::rdb::panic_in_next_save();
    crate::reply::ok(ctx);
    Ok(())
});
