//! Functions of TIME values: TIME(), TIME_TO_SEC, SEC_TO_TIME, TIMEDIFF,
//! ADDTIME, SUBTIME and MAKETIME, as MySQL computes them. A TIME is signed
//! microseconds (`Value::Time`), at most 838:59:59 either way; results
//! beyond are clipped to that, as MySQL clips them (with a warning there).

use crate::eval::to_text;
use latsdb_types::mysql_types::{names_a_date, parse_time, MAX_TIME_MICROS, MICROS_PER_DAY};
use latsdb_types::value::{parse_datetime, Decimal};
use latsdb_types::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeFunc {
    /// TIME(x): the time of a time, or the time of day of a datetime.
    Of,
    ToSeconds,
    FromSeconds,
    Diff,
    Add,
    Subtract,
    Make,
}

/// A point in time or a span, as these functions read their arguments:
/// a datetime (text with a date part counts as one) or a time.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Moment {
    DateTime(i64),
    Time(i64),
}

fn moment(v: &Value) -> Option<Moment> {
    match v {
        Value::Time(us) => Some(Moment::Time(*us)),
        Value::DateTime(us) | Value::Timestamp(us) => Some(Moment::DateTime(*us)),
        Value::Date(d) => Some(Moment::DateTime(i64::from(*d) * MICROS_PER_DAY)),
        Value::Null => None,
        other => {
            let text = to_text(other);
            if names_a_date(&text) {
                parse_datetime(&text).map(Moment::DateTime)
            } else {
                parse_time(&text).map(Moment::Time)
            }
        }
    }
}

/// A span clipped to TIME's range.
fn clipped(us: i64) -> Value {
    Value::Time(us.clamp(-MAX_TIME_MICROS, MAX_TIME_MICROS))
}

/// Seconds as MySQL shows them: an integer, or a decimal with the digits
/// of a second the time has ('00:00:01.5' is 1.5; MySQL uses the digits
/// the argument declares, the same for a value that uses them all).
fn seconds_value(us: i64) -> Value {
    if us % 1_000_000 == 0 {
        return Value::Int(us / 1_000_000);
    }
    let (mut unscaled, mut scale) = (i128::from(us), 6);
    while unscaled % 10 == 0 {
        unscaled /= 10;
        scale -= 1;
    }
    Value::Decimal(Decimal::new(unscaled, scale))
}

/// Microseconds of a number of seconds (an integer, a decimal or a float);
/// None when it is none or too large.
fn micros_of_seconds(v: &Value) -> Option<i64> {
    let seconds = match crate::eval::numeric(v) {
        Value::Int(i) => Decimal::new(i128::from(i), 0),
        Value::UInt(u) => Decimal::new(i128::from(u), 0),
        Value::Decimal(d) => d,
        Value::Float(f) => Decimal::of_double(f)?,
        _ => return None,
    };
    let micros = seconds.rescale(6)?.unscaled;
    i64::try_from(micros.clamp(i128::from(i64::MIN / 2), i128::from(i64::MAX / 2))).ok()
}

pub fn call(f: TimeFunc, a: &[Value]) -> Value {
    let arg = |i: usize| a.get(i).and_then(moment);
    match f {
        TimeFunc::Of => match arg(0) {
            Some(Moment::Time(us)) => clipped(us),
            Some(Moment::DateTime(us)) => Value::Time(us.rem_euclid(MICROS_PER_DAY)),
            None => Value::Null,
        },
        TimeFunc::ToSeconds => match arg(0) {
            Some(Moment::Time(us)) => seconds_value(us),
            Some(Moment::DateTime(us)) => seconds_value(us.rem_euclid(MICROS_PER_DAY)),
            None => Value::Null,
        },
        TimeFunc::FromSeconds => a.first().and_then(micros_of_seconds).map_or(Value::Null, clipped),
        TimeFunc::Diff => match (arg(0), arg(1)) {
            (Some(Moment::Time(x)), Some(Moment::Time(y))) => clipped(x - y),
            (Some(Moment::DateTime(x)), Some(Moment::DateTime(y))) => clipped(x.saturating_sub(y)),
            // A datetime and a time: MySQL answers NULL.
            _ => Value::Null,
        },
        TimeFunc::Add | TimeFunc::Subtract => {
            let sign = if f == TimeFunc::Add { 1 } else { -1 };
            // The second argument is a span; a datetime there is NULL.
            let Some(Moment::Time(span)) = arg(1) else { return Value::Null };
            match arg(0) {
                Some(Moment::Time(us)) => clipped(us + sign * span),
                Some(Moment::DateTime(us)) => {
                    let sum = us + sign * span;
                    let year = crate::dates::Civil::from_micros(sum).year;
                    if (0..=9999).contains(&year) {
                        Value::DateTime(sum)
                    } else {
                        Value::Null
                    }
                }
                None => Value::Null,
            }
        }
        TimeFunc::Make => make_time(a),
    }
}

/// MAKETIME(hour, minute, second): NULL when the minute or second is
/// outside 0-59.
fn make_time(a: &[Value]) -> Value {
    let whole = |v: &Value| crate::eval::numeric(v).as_f64().map(|f| f.trunc() as i64);
    let (Some(hours), Some(minutes), Some(second_micros)) =
        (a.first().and_then(whole), a.get(1).and_then(whole), a.get(2).and_then(micros_of_seconds))
    else {
        return Value::Null;
    };
    if !(0..60).contains(&minutes) || !(0..60_000_000).contains(&second_micros) {
        return Value::Null;
    }
    let magnitude = hours.unsigned_abs().min(1_000) as i64 * 3_600_000_000 + minutes * 60_000_000 + second_micros;
    clipped(if hours < 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: Value) -> String {
        v.to_string()
    }

    fn s(t: &str) -> Value {
        Value::Str(t.into())
    }

    #[test]
    fn time_functions_answer_as_mysql() {
        assert_eq!(text(call(TimeFunc::Of, &[s("2024-01-02 10:11:12")])), "10:11:12");
        assert_eq!(call(TimeFunc::ToSeconds, &[s("01:00:01")]), Value::Int(3601));
        assert_eq!(text(call(TimeFunc::ToSeconds, &[s("-00:00:01.5")])), "-1.5");
        assert_eq!(text(call(TimeFunc::FromSeconds, &[Value::Int(3661)])), "01:01:01");
        assert_eq!(text(call(TimeFunc::FromSeconds, &[Value::Int(10_000_000)])), "838:59:59");
        assert_eq!(text(call(TimeFunc::Diff, &[s("10:00:00"), s("12:30:00")])), "-02:30:00");
        assert_eq!(text(call(TimeFunc::Diff, &[s("2024-01-02 00:00:00"), s("2024-01-01 12:00:00")])), "12:00:00");
        assert_eq!(call(TimeFunc::Diff, &[s("2024-01-02 00:00:00"), s("12:00:00")]), Value::Null);
        assert_eq!(text(call(TimeFunc::Add, &[s("2024-01-01 23:00:00"), s("02:00:00")])), "2024-01-02 01:00:00");
        assert_eq!(text(call(TimeFunc::Subtract, &[s("01:00:00"), s("02:00:00.5")])), "-01:00:00.500000");
        assert_eq!(text(call(TimeFunc::Make, &[Value::Int(-12), Value::Int(5), Value::Int(7)])), "-12:05:07");
        assert_eq!(call(TimeFunc::Make, &[Value::Int(1), Value::Int(60), Value::Int(0)]), Value::Null);
    }
}
