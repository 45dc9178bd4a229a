//! A register ordered by stamp among the operations that write it: the
//! TTL of a key (EXPIRE, PERSIST, a SET without KEEPTTL), the type a key
//! holds. A data write that leaves the TTL alone is not an operation of
//! the TTL register, so it cannot erase a TTL set concurrently.

use crate::converge::version::Stamp;

/// A value and the stamp of the operation that wrote it ([`Stamp::ZERO`]:
/// never written here). The stamp stays at rest: a resend of an older write
/// must still lose to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Register<T> {
    stamp: Stamp,
    value: T,
}

impl<T: Clone> Register<T> {
    /// A value every site holds, never written here.
    pub fn at_rest(value: T) -> Self {
        Self {
            stamp: Stamp::ZERO,
            value,
        }
    }

    /// A write stamped `stamp`: it replaces only an older one.
    pub fn write(&mut self, stamp: Stamp, value: T) {
        if self.stamp >= stamp {
            return;
        }
        self.stamp = stamp;
        self.value = value;
    }

    /// Takes in another site's register.
    pub fn merge(&mut self, other: &Register<T>) {
        self.write(other.stamp, other.value.clone());
    }

    /// The value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The stamp of the write that holds.
    pub fn stamp(&self) -> Stamp {
        self.stamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_ttl_operation_wins_in_any_order() {
        let writes = [
            (Stamp::new(3, 1), Some(1000u64)),
            (Stamp::new(5, 2), None),
            (Stamp::new(4, 1), Some(2000)),
        ];
        for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
            let mut ttl = Register::at_rest(Some(7u64));
            for i in order {
                ttl.write(writes[i].0, writes[i].1);
            }
            assert_eq!(ttl.value(), &None, "PERSIST at the newest stamp");
        }
    }

    #[test]
    fn a_register_keeps_its_stamp_against_older_resends() {
        let mut r = Register::at_rest(1);
        r.write(Stamp::new(3, 1), 2);
        r.write(Stamp::new(3, 1), 9);
        r.write(Stamp::new(2, 7), 9);
        assert_eq!((r.value(), r.stamp()), (&2, Stamp::new(3, 1)));
        r.write(Stamp::new(4, 2), 3);
        assert_eq!(r.value(), &3);
    }
}
