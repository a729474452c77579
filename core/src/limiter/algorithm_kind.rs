//! The algorithms a request can name, and the one dispatch from a kind to its type.

use crate::algorithm::Algorithm;
use crate::with_algorithm;

/// The algorithms a request can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgorithmKind {
    /// Fixed window (`fixed`).
    Fixed,
    /// Sliding window counter (`sliding`).
    Sliding,
    /// Exact sliding log (`log`).
    Log,
    /// Token bucket (`token`).
    Token,
    /// Generic cell rate algorithm (`gcra`).
    Gcra,
}

impl AlgorithmKind {
    /// Every algorithm with its name in commands.
    pub const ALL: [(AlgorithmKind, &'static str); 5] = [
        (AlgorithmKind::Fixed, "fixed"),
        (AlgorithmKind::Sliding, "sliding"),
        (AlgorithmKind::Log, "log"),
        (AlgorithmKind::Token, "token"),
        (AlgorithmKind::Gcra, "gcra"),
    ];

    /// The algorithm named `name` (case-insensitive).
    pub fn from_name(name: &[u8]) -> Option<AlgorithmKind> {
        Self::ALL
            .iter()
            .find(|(_, known)| name.eq_ignore_ascii_case(known.as_bytes()))
            .map(|(kind, _)| *kind)
    }

    /// The algorithm whose [`Algorithm::ID`] is `id`.
    pub fn from_id(id: u8) -> Option<AlgorithmKind> {
        Self::ALL
            .iter()
            .map(|(kind, _)| *kind)
            .find(|kind| kind.id() == id)
    }

    /// The algorithm's name in commands.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(kind, _)| *kind == self)
            .map_or("?", |(_, name)| name)
    }

    /// Whether the algorithm takes a `BURST` (a bucket capacity apart from the limit).
    pub fn has_burst(self) -> bool {
        matches!(self, AlgorithmKind::Token | AlgorithmKind::Gcra)
    }

    fn id(self) -> u8 {
        with_algorithm!(self, id_of())
    }
}

/// Calls the generic function `f::<A>(args)` with `A` the algorithm `kind` (an
/// [`AlgorithmKind`]) names: the one dispatch from a stored or parsed kind to the
/// algorithm's type, shared with the fuzz targets.
#[macro_export]
macro_rules! with_algorithm {
    ($kind:expr, $f:ident ( $($arg:expr),* )) => {
        match $kind {
            $crate::limiter::AlgorithmKind::Fixed => $f::<$crate::fixed_window::Fixed>($($arg),*),
            $crate::limiter::AlgorithmKind::Sliding => {
                $f::<$crate::sliding_window::Sliding>($($arg),*)
            }
            $crate::limiter::AlgorithmKind::Log => $f::<$crate::sliding_log::Log>($($arg),*),
            $crate::limiter::AlgorithmKind::Token => $f::<$crate::token_bucket::Token>($($arg),*),
            $crate::limiter::AlgorithmKind::Gcra => $f::<$crate::gcra::Gcra>($($arg),*),
        }
    };
}

fn id_of<A: Algorithm>() -> u8 {
    A::ID
}
