//! The durasync guest SDK (being written).
