//! What a plugin vendor tests with: the services as JSON lines for the
//! language shims' unit tests ([`harness`]), and a built plugin's golden
//! cases through the real runtime ([`golden`]).

pub mod golden;
pub mod harness;
