//! Date functions: YEAR() and the other parts of a date, DATE(),
//! DATEDIFF() and DATE_FORMAT(), with MySQL's results (an argument that is
//! not a date gives NULL).

use latsdb_types::value::{civil_from_days, days_from_civil};

/// A part of a date or datetime, as YEAR(), MONTH(), ... and EXTRACT()
/// return it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Year,
    Quarter,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    Microsecond,
    /// 1 = Sunday .. 7 = Saturday.
    DayOfWeek,
    /// 0 = Monday .. 6 = Sunday.
    Weekday,
    DayOfYear,
}

/// The unit of an INTERVAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Microsecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

impl Unit {
    fn micros(self) -> Option<i64> {
        Some(match self {
            Unit::Microsecond => 1,
            Unit::Second => 1_000_000,
            Unit::Minute => 60_000_000,
            Unit::Hour => 3_600_000_000,
            Unit::Day => 86_400_000_000,
            Unit::Week => 7 * 86_400_000_000,
            Unit::Month | Unit::Quarter | Unit::Year => return None,
        })
    }

    /// Whether adding it to a date keeps a date (no time of day appears).
    pub fn keeps_dates(self) -> bool {
        !matches!(self, Unit::Microsecond | Unit::Second | Unit::Minute | Unit::Hour)
    }
}

/// A compound INTERVAL unit: YEAR_MONTH, or a run of DAY, HOUR, MINUTE,
/// SECOND and MICROSECOND from `first` to `last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compound {
    first: Unit,
    last: Unit,
}

impl Compound {
    /// The units MySQL has (YEAR_MONTH, DAY_HOUR, ... SECOND_MICROSECOND,
    /// which the parser hands over as MICROSECOND TO SECOND).
    pub fn new(first: Unit, last: Unit) -> Option<Compound> {
        if (first, last) == (Unit::Microsecond, Unit::Second) {
            return Some(Compound { first: Unit::Second, last: Unit::Microsecond });
        }
        let rank = |u: Unit| match u {
            Unit::Day => Some(0),
            Unit::Hour => Some(1),
            Unit::Minute => Some(2),
            Unit::Second => Some(3),
            Unit::Microsecond => Some(4),
            _ => None,
        };
        let ok = (first, last) == (Unit::Year, Unit::Month)
            || matches!((rank(first), rank(last)), (Some(a), Some(b)) if a < b);
        ok.then_some(Compound { first, last })
    }

    /// The amount `text` ('1:30', '-1 2:03:04.5', '2-6') stands for, as a
    /// count of months or of microseconds: its numbers are read from the
    /// right (missing leading parts are 0, as in MySQL), any non-digit
    /// separates them, a leading '-' makes it negative and the microsecond
    /// part is a fraction of a second. None when it has no number or more
    /// parts than the unit.
    /// Its units, largest first.
    fn units(&self) -> Option<&'static [Unit]> {
        static YEAR_MONTH: [Unit; 2] = [Unit::Year, Unit::Month];
        static TIME: [Unit; 5] = [Unit::Day, Unit::Hour, Unit::Minute, Unit::Second, Unit::Microsecond];
        if self.first == Unit::Year {
            return Some(&YEAR_MONTH);
        }
        let from = TIME.iter().position(|u| *u == self.first)?;
        let to = TIME.iter().position(|u| *u == self.last)?;
        TIME.get(from..=to)
    }

    /// EXTRACT(unit FROM d): the parts' digits side by side (YEAR_MONTH of
    /// 2019-07-02 is 201907, DAY_MINUTE of 02 01:02 is 20102), six digits
    /// for microseconds.
    pub fn extract(&self, c: &Civil) -> Option<i64> {
        let mut out: i64 = 0;
        for unit in self.units()? {
            out = match unit {
                Unit::Year => c.year,
                Unit::Month => out * 100 + c.month as i64,
                Unit::Day => c.day as i64,
                Unit::Hour => out * 100 + c.hour,
                Unit::Minute => out * 100 + c.minute,
                Unit::Second => out * 100 + c.second,
                _ => out * 1_000_000 + c.micros,
            };
        }
        Some(out)
    }

    pub fn amount(&self, text: &str) -> Option<(i64, Unit)> {
        let text = text.trim();
        let (negative, text) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let numbers: Vec<&str> = text.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty()).collect();
        let units = self.units()?;
        if numbers.is_empty() || numbers.len() > units.len() {
            return None;
        }
        let mut total: i64 = 0;
        let skipped = units.len() - numbers.len();
        for (unit, digits) in units[skipped..].iter().zip(&numbers) {
            let value: i64 = if *unit == Unit::Microsecond {
                // A fraction of a second: '5' is 500,000 microseconds.
                let kept = &digits[..digits.len().min(6)];
                kept.parse::<i64>().ok()? * 10i64.pow(6 - kept.len() as u32)
            } else {
                digits.parse().ok()?
            };
            let scale = match unit {
                Unit::Year => 12,
                Unit::Month => 1,
                other => other.micros()?,
            };
            total = total.checked_add(value.checked_mul(scale)?)?;
        }
        let unit = if self.first == Unit::Year { Unit::Month } else { Unit::Microsecond };
        Some((if negative { -total } else { total }, unit))
    }
}

/// `us` (microseconds since 1970) plus `n` units, as DATE_ADD computes it:
/// adding months keeps the day of the month, or takes the month's last day
/// if it has fewer. None when the result is outside years 0-9999.
pub fn add(us: i64, n: i64, unit: Unit) -> Option<i64> {
    let out = match unit.micros() {
        Some(step) => us.checked_add(n.checked_mul(step)?)?,
        None => {
            let months = match unit {
                Unit::Quarter => n.checked_mul(3)?,
                Unit::Year => n.checked_mul(12)?,
                _ => n,
            };
            let c = Civil::from_micros(us);
            let total = c.year.checked_mul(12)?.checked_add(c.month as i64 - 1)?.checked_add(months)?;
            let (year, month) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
            let next = if month == 12 { days_from_civil(year + 1, 1, 1) } else { days_from_civil(year, month + 1, 1) };
            let last_day = (next - days_from_civil(year, month, 1)) as u32;
            let days = days_from_civil(year, month, c.day.min(last_day));
            days.checked_mul(86_400_000_000)?.checked_add(us.rem_euclid(86_400_000_000))?
        }
    };
    let year = Civil::from_micros(out).year;
    (0..=9999).contains(&year).then_some(out)
}

/// TIMESTAMPDIFF(unit, a, b): whole units from `a` to `b` (microseconds
/// since 1970), truncated toward zero; months count only when the day and
/// time of the month are reached, as in MySQL.
pub fn diff(a: i64, b: i64, unit: Unit) -> i64 {
    if let Some(step) = unit.micros() {
        return (b - a) / step;
    }
    let (ca, cb) = (Civil::from_micros(a), Civil::from_micros(b));
    let months_of = |c: &Civil| c.year * 12 + c.month as i64 - 1;
    // Where in its month each instant is: day, then time of day.
    let within = |c: &Civil, us: i64| (c.day, us.rem_euclid(86_400_000_000));
    let mut months = months_of(&cb) - months_of(&ca);
    if months > 0 && within(&cb, b) < within(&ca, a) {
        months -= 1;
    } else if months < 0 && within(&cb, b) > within(&ca, a) {
        months += 1;
    }
    match unit {
        Unit::Quarter => months / 3,
        Unit::Year => months / 12,
        _ => months,
    }
}

/// A datetime taken apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub days: i64,
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    pub micros: i64,
}

impl Civil {
    /// From microseconds since 1970-01-01 00:00:00.
    pub fn from_micros(us: i64) -> Civil {
        let days = us.div_euclid(86_400_000_000);
        let rest = us.rem_euclid(86_400_000_000);
        let (year, month, day) = civil_from_days(days);
        let secs = rest / 1_000_000;
        Civil {
            days,
            year,
            month,
            day,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            micros: rest % 1_000_000,
        }
    }

    /// 0 = Sunday .. 6 = Saturday (1970-01-01 was a Thursday).
    fn sunday_based(&self) -> i64 {
        (self.days + 4).rem_euclid(7)
    }

    /// 1 = January 1st.
    fn day_of_year(&self) -> i64 {
        self.days - days_from_civil(self.year, 1, 1) + 1
    }

    pub fn part(&self, part: Part) -> i64 {
        match part {
            Part::Year => self.year,
            Part::Quarter => (self.month as i64 - 1) / 3 + 1,
            Part::Month => self.month as i64,
            Part::Day => self.day as i64,
            Part::Hour => self.hour,
            Part::Minute => self.minute,
            Part::Second => self.second,
            Part::Microsecond => self.micros,
            Part::DayOfWeek => self.sunday_based() + 1,
            Part::Weekday => (self.sunday_based() + 6) % 7,
            Part::DayOfYear => self.day_of_year(),
        }
    }

    /// The week number and its year as MySQL's `calc_week` counts them,
    /// for WEEK(d, mode) and the week specifiers of DATE_FORMAT: weeks
    /// start on Monday or Sunday; week 1 is the first with a first weekday
    /// in the year or the first with 4 or more days in it; with
    /// `Week::YEAR` the days before it belong to the year before's last
    /// week (else they are week 0), and the year's last days may be week 1
    /// of the next one.
    pub fn week(&self, behaviour: u8) -> (i64, i64) {
        let monday_first = behaviour & Week::MONDAY_FIRST != 0;
        let mut week_year = behaviour & Week::YEAR != 0;
        let first_weekday = behaviour & Week::FIRST_WEEKDAY != 0;
        let days_in = |y: i64| days_from_civil(y + 1, 1, 1) - days_from_civil(y, 1, 1);
        // 0 is the first day of the week.
        let weekday_of = |day: i64| (day + if monday_first { 3 } else { 4 }).rem_euclid(7);
        let mut year = self.year;
        let mut first = days_from_civil(year, 1, 1);
        let mut weekday = weekday_of(first);
        let starts_late = |weekday: i64| if first_weekday { weekday != 0 } else { weekday >= 4 };
        if self.month == 1 && (self.day as i64) <= 7 - weekday {
            if !week_year && starts_late(weekday) {
                return (0, year);
            }
            week_year = true;
            year -= 1;
            first -= days_in(year);
            weekday = weekday_of(first);
        }
        let days = if starts_late(weekday) { self.days - (first + 7 - weekday) } else { self.days - (first - weekday) };
        if week_year && days >= 52 * 7 {
            let next = (weekday + days_in(year)) % 7;
            if !starts_late(next) {
                return (1, year + 1);
            }
        }
        (days / 7 + 1, year)
    }
}

/// The bits of MySQL's week behaviour (`WEEK(d, mode)` turns its mode into
/// them with `Week::of_mode`).
pub struct Week;

impl Week {
    pub const MONDAY_FIRST: u8 = 1;
    pub const YEAR: u8 = 2;
    pub const FIRST_WEEKDAY: u8 = 4;

    /// WEEK()'s mode 0-7 as behaviour bits (a Sunday-first mode counts from
    /// the first Sunday, a Monday-first one from the first 4-day week,
    /// unless bit 4 turns that around).
    pub fn of_mode(mode: i64) -> u8 {
        let mut b = (mode & 7) as u8;
        if b & Week::MONDAY_FIRST == 0 {
            b ^= Week::FIRST_WEEKDAY;
        }
        b
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// DATE_FORMAT(): `%` specifiers as MySQL documents them; an unknown one
/// stands for the character after the `%`.
pub fn format(c: &Civil, fmt: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    let month = MONTHS[(c.month as usize).saturating_sub(1) % 12];
    let day = DAYS[c.sunday_based() as usize];
    let h12 = (c.hour + 11) % 12 + 1;
    let am_pm = if c.hour < 12 { "AM" } else { "PM" };
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let Some(spec) = chars.next() else {
            out.push('%');
            break;
        };
        let _ = match spec {
            'a' => write!(out, "{}", &day[..3]),
            'b' => write!(out, "{}", &month[..3]),
            'c' => write!(out, "{}", c.month),
            'D' => {
                let suffix = match (c.day % 10, c.day % 100) {
                    (_, 11..=13) => "th",
                    (1, _) => "st",
                    (2, _) => "nd",
                    (3, _) => "rd",
                    _ => "th",
                };
                write!(out, "{}{suffix}", c.day)
            }
            'd' => write!(out, "{:02}", c.day),
            'e' => write!(out, "{}", c.day),
            'f' => write!(out, "{:06}", c.micros),
            'H' => write!(out, "{:02}", c.hour),
            'h' | 'I' => write!(out, "{h12:02}"),
            'i' => write!(out, "{:02}", c.minute),
            'j' => write!(out, "{:03}", c.day_of_year()),
            'k' => write!(out, "{}", c.hour),
            'l' => write!(out, "{h12}"),
            'M' => write!(out, "{month}"),
            'm' => write!(out, "{:02}", c.month),
            'p' => write!(out, "{am_pm}"),
            'r' => write!(out, "{h12:02}:{:02}:{:02} {am_pm}", c.minute, c.second),
            'S' | 's' => write!(out, "{:02}", c.second),
            'T' => write!(out, "{:02}:{:02}:{:02}", c.hour, c.minute, c.second),
            'U' => write!(out, "{:02}", c.week(Week::FIRST_WEEKDAY).0),
            'u' => write!(out, "{:02}", c.week(Week::MONDAY_FIRST).0),
            'V' => write!(out, "{:02}", c.week(Week::YEAR | Week::FIRST_WEEKDAY).0),
            'v' => write!(out, "{:02}", c.week(Week::YEAR | Week::MONDAY_FIRST).0),
            'W' => write!(out, "{day}"),
            'w' => write!(out, "{}", c.sunday_based()),
            'X' => write!(out, "{:04}", c.week(Week::YEAR | Week::FIRST_WEEKDAY).1),
            'x' => write!(out, "{:04}", c.week(Week::YEAR | Week::MONDAY_FIRST).1),
            'Y' => write!(out, "{:04}", c.year),
            'y' => write!(out, "{:02}", c.year.rem_euclid(100)),
            other => write!(out, "{other}"),
        };
    }
    out
}

/// What STR_TO_DATE read: a DATE, a DATETIME (microseconds since 1970) or
/// a TIME of day (as its text), by the specifiers its format has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    Date(i64),
    DateTime(i64),
    Time(String),
}

/// STR_TO_DATE(text, format): the inverse of DATE_FORMAT, as MySQL reads
/// it: spaces before each part of the text are skipped, numbers take up to
/// their specifier's digits, and text left over at the end is ignored.
/// None (NULL in SQL) when the text does not fit the format or names no
/// valid date (MySQL's NO_ZERO_DATE and NO_ZERO_IN_DATE: a zero month or
/// day is not one).
pub fn parse(text: &str, fmt: &str) -> Option<Parsed> {
    let (mut year, mut month, mut day, mut yday) = (0i64, 0i64, 0i64, 0i64);
    let (mut hour, mut minute, mut second, mut micros) = (0i64, 0i64, 0i64, 0i64);
    let (mut has_date, mut has_time) = (false, false);
    let mut pm: Option<bool> = None;
    let mut twelve_hour = false;
    let mut val = text.as_bytes();
    let skip_spaces = |v: &mut &[u8]| {
        while let Some((c, rest)) = v.split_first() {
            if !c.is_ascii_whitespace() {
                break;
            }
            *v = rest;
        }
    };
    let number = |v: &mut &[u8], max_digits: usize| -> Option<(i64, usize)> {
        let n = v.iter().take(max_digits).take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        let x = std::str::from_utf8(&v[..n]).ok()?.parse().ok()?;
        *v = &v[n..];
        Some((x, n))
    };
    let word = |v: &mut &[u8], names: &[&str], short: bool| -> Option<i64> {
        for (i, name) in names.iter().enumerate() {
            let name = if short { &name[..3] } else { name };
            if v.len() >= name.len() && v[..name.len()].eq_ignore_ascii_case(name.as_bytes()) {
                *v = &v[name.len()..];
                return Some(i as i64);
            }
        }
        None
    };
    // %T and %r are shorthands.
    let fmt = fmt.replace("%T", "%H:%i:%s").replace("%r", "%I:%i:%S %p");
    let mut spec = fmt.chars().peekable();
    while let Some(f) = spec.next() {
        skip_spaces(&mut val);
        if f != '%' || spec.peek().is_none() {
            if f.is_whitespace() {
                continue;
            }
            let mut buf = [0u8; 4];
            let lit = f.encode_utf8(&mut buf).as_bytes();
            val = val.strip_prefix(lit)?;
            continue;
        }
        let Some(s) = spec.next() else { break };
        match s {
            'Y' => {
                let (y, digits) = number(&mut val, 4)?;
                year = if digits <= 2 { two_digit_year(y) } else { y };
                has_date = true;
            }
            'y' => {
                year = two_digit_year(number(&mut val, 2)?.0);
                has_date = true;
            }
            'm' | 'c' => {
                month = number(&mut val, 2)?.0;
                has_date = true;
            }
            'M' | 'b' => {
                month = word(&mut val, &MONTHS, s == 'b')? + 1;
                has_date = true;
            }
            'd' | 'e' => {
                day = number(&mut val, 2)?.0;
                has_date = true;
            }
            'D' => {
                day = number(&mut val, 2)?.0;
                val = val.get(2..)?;
                has_date = true;
            }
            'j' => {
                yday = number(&mut val, 3)?.0;
                has_date = true;
            }
            'W' | 'a' => {
                word(&mut val, &DAYS, s == 'a')?;
            }
            'H' | 'k' => {
                hour = number(&mut val, 2)?.0;
                has_time = true;
            }
            'h' | 'I' | 'l' => {
                hour = number(&mut val, 2)?.0;
                twelve_hour = true;
                has_time = true;
            }
            'i' => {
                minute = number(&mut val, 2)?.0;
                has_time = true;
            }
            's' | 'S' => {
                second = number(&mut val, 2)?.0;
                has_time = true;
            }
            'f' => {
                let (x, digits) = number(&mut val, 6)?;
                micros = x * 10i64.pow(6 - digits as u32);
                has_time = true;
            }
            'p' => {
                pm = Some(word(&mut val, &["AM", "PM"], false)? == 1);
                has_time = true;
            }
            '%' => val = val.strip_prefix(b"%")?,
            // Week numbers and the rest: not read.
            _ => return None,
        }
    }
    if let Some(pm) = pm {
        if !twelve_hour || !(1..=12).contains(&hour) {
            return None;
        }
        hour = hour % 12 + if pm { 12 } else { 0 };
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let time = ((hour * 60 + minute) * 60 + second) * 1_000_000 + micros;
    if !has_date {
        let c = Civil::from_micros(time);
        let format = if micros != 0 { "%H:%i:%s.%f" } else { "%H:%i:%s" };
        return has_time.then(|| Parsed::Time(self::format(&c, format)));
    }
    let days = if yday > 0 {
        if !(1..=days_from_civil(year + 1, 1, 1) - days_from_civil(year, 1, 1)).contains(&yday) {
            return None;
        }
        days_from_civil(year, 1, 1) + yday - 1
    } else {
        if !(1..=12).contains(&month) || day < 1 || !(0..=9999).contains(&year) {
            return None;
        }
        let days = days_from_civil(year, month as u32, day as u32);
        // A day past the month's end would roll into the next month.
        if civil_from_days(days).2 != day as u32 {
            return None;
        }
        days
    };
    Some(if has_time { Parsed::DateTime(days * 86_400_000_000 + time) } else { Parsed::Date(days) })
}

/// A year written with two digits: 70-99 are 1970-1999, 0-69 2000-2069.
pub fn two_digit_year(y: i64) -> i64 {
    match y {
        0..=69 => y + 2000,
        70..=99 => y + 1900,
        _ => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i64, m: u32, d: u32, hms: (i64, i64, i64), micros: i64) -> Civil {
        let us = (days_from_civil(y, m, d) * 86_400 + hms.0 * 3600 + hms.1 * 60 + hms.2) * 1_000_000 + micros;
        Civil::from_micros(us)
    }

    #[test]
    fn parts_of_a_datetime() {
        let c = at(2024, 2, 29, (13, 5, 9), 250);
        let parts = [
            Part::Year,
            Part::Quarter,
            Part::Month,
            Part::Day,
            Part::Hour,
            Part::Minute,
            Part::Second,
            Part::Microsecond,
            Part::DayOfWeek,
            Part::Weekday,
            Part::DayOfYear,
        ];
        // 2024-02-29 was a Thursday.
        assert_eq!(parts.map(|p| c.part(p)), [2024, 1, 2, 29, 13, 5, 9, 250, 5, 3, 60]);
        assert_eq!(at(1969, 12, 31, (23, 59, 59), 0).part(Part::Year), 1969);
    }

    #[test]
    fn intervals_add_as_mysql_does() {
        let day = |y, m, d| days_from_civil(y, m, d) * 86_400_000_000;
        assert_eq!(add(day(2024, 1, 31), 1, Unit::Month), Some(day(2024, 2, 29)));
        assert_eq!(add(day(2024, 3, 31), -1, Unit::Quarter), Some(day(2023, 12, 31)));
        assert_eq!(add(day(2024, 2, 29), 1, Unit::Year), Some(day(2025, 2, 28)));
        assert_eq!(add(day(2024, 12, 31) + 1, 1, Unit::Day), Some(day(2025, 1, 1) + 1));
        assert_eq!(
            add(day(2024, 1, 1), -90, Unit::Minute),
            Some(day(2023, 12, 31) + 22 * 3_600_000_000 + 30 * 60_000_000)
        );
        assert_eq!(add(day(9999, 12, 31), 1, Unit::Day), None);
        assert_eq!(add(day(2024, 1, 1), i64::MAX, Unit::Year), None);
    }

    #[test]
    fn timestampdiff_counts_whole_units() {
        let day = |y, m, d| days_from_civil(y, m, d) * 86_400_000_000;
        assert_eq!(diff(day(2024, 1, 1), day(2024, 1, 31), Unit::Day), 30);
        assert_eq!(diff(day(2024, 1, 31), day(2024, 1, 1), Unit::Day), -30);
        assert_eq!(diff(day(2024, 1, 1), day(2024, 1, 1) + 5_400_000_000, Unit::Hour), 1);
        assert_eq!(diff(day(2024, 1, 31), day(2024, 2, 29), Unit::Month), 0);
        assert_eq!(diff(day(2024, 1, 31), day(2024, 3, 31), Unit::Month), 2);
        assert_eq!(diff(day(2023, 6, 15), day(2024, 6, 14), Unit::Year), 0);
        assert_eq!(diff(day(2023, 6, 15), day(2024, 6, 15), Unit::Year), 1);
        assert_eq!(diff(day(2024, 6, 15), day(2023, 6, 16), Unit::Year), 0);
        assert_eq!(diff(day(2024, 1, 1), day(2024, 12, 31), Unit::Quarter), 3);
    }

    #[test]
    fn compound_intervals_read_their_parts_from_the_right() {
        let c = |a, b| Compound::new(a, b).unwrap();
        assert_eq!(c(Unit::Year, Unit::Month).amount("2-6"), Some((30, Unit::Month)));
        assert_eq!(c(Unit::Hour, Unit::Minute).amount("1:30"), Some((90 * 60_000_000, Unit::Microsecond)));
        assert_eq!(c(Unit::Hour, Unit::Minute).amount("30"), Some((30 * 60_000_000, Unit::Microsecond)));
        assert_eq!(
            c(Unit::Day, Unit::Microsecond).amount("-1 2:03:04.5"),
            Some((-(((26 * 60 + 3) * 60 + 4) * 1_000_000 + 500_000), Unit::Microsecond))
        );
        assert_eq!(c(Unit::Microsecond, Unit::Second).amount("1.999999"), Some((1_999_999, Unit::Microsecond)));
        assert_eq!(c(Unit::Minute, Unit::Second).amount("1:2:3"), None);
        assert_eq!(c(Unit::Minute, Unit::Second).amount("x"), None);
        // EXTRACT of them, MySQL's documented examples.
        let d = Civil::from_micros(days_from_civil(2019, 7, 2) * 86_400_000_000 + 3_723_000_250);
        assert_eq!(c(Unit::Year, Unit::Month).extract(&d), Some(201907));
        assert_eq!(c(Unit::Day, Unit::Minute).extract(&d), Some(20102));
        assert_eq!(c(Unit::Hour, Unit::Second).extract(&d), Some(10203));
        assert_eq!(c(Unit::Microsecond, Unit::Second).extract(&d), Some(3_000_250));
        assert_eq!(c(Unit::Day, Unit::Microsecond).extract(&d), Some(2_010_203_000_250));
        assert_eq!(Compound::new(Unit::Minute, Unit::Hour), None);
        assert_eq!(Compound::new(Unit::Year, Unit::Day), None);
    }

    #[test]
    fn str_to_date_reads_what_date_format_writes() {
        let date = |y, m, d| Some(Parsed::Date(days_from_civil(y, m, d)));
        let at = |y, m, d, h: i64, mi: i64, s: i64| {
            Some(Parsed::DateTime(days_from_civil(y, m, d) * 86_400_000_000 + ((h * 60 + mi) * 60 + s) * 1_000_000))
        };
        assert_eq!(parse("01,5,2013", "%d,%m,%Y"), date(2013, 5, 1));
        assert_eq!(parse("May 1, 2013", "%M %d,%Y"), date(2013, 5, 1));
        assert_eq!(parse("a09:30:17", "a%h:%i:%s"), Some(Parsed::Time("09:30:17".into())));
        assert_eq!(parse("9:30:17 PM", "%h:%i:%s %p"), Some(Parsed::Time("21:30:17".into())));
        assert_eq!(parse("12:00:00 AM", "%r"), Some(Parsed::Time("00:00:00".into())));
        assert_eq!(parse("2024-02-29 13:05:09", "%Y-%m-%d %T"), at(2024, 2, 29, 13, 5, 9));
        assert_eq!(parse("  24-2-9", "%y-%c-%e"), date(2024, 2, 9));
        assert_eq!(parse("2024-060", "%Y-%j"), date(2024, 2, 29));
        assert_eq!(parse("Thu, 29th Feb 2024", "%a, %D %b %Y"), date(2024, 2, 29));
        assert_eq!(parse("2024-02-29 trailing", "%Y-%m-%d"), date(2024, 2, 29));
        assert_eq!(
            parse("2024-01-02 03:04:05.5", "%Y-%m-%d %H:%i:%s.%f"),
            at(2024, 1, 2, 3, 4, 5).map(|p| match p {
                Parsed::DateTime(us) => Parsed::DateTime(us + 500_000),
                other => other,
            })
        );
        // Not dates: NULL.
        assert_eq!(parse("2024-02-30", "%Y-%m-%d"), None);
        assert_eq!(parse("2024-13-01", "%Y-%m-%d"), None);
        assert_eq!(parse("2024", "%Y"), None);
        assert_eq!(parse("x2024-01-01", "%Y-%m-%d"), None);
        assert_eq!(parse("13:00 PM", "%h:%i %p"), None);
        assert_eq!(parse("25:00", "%H:%i"), None);
    }

    #[test]
    fn date_format_specifiers_match_mysql() {
        let c = at(2024, 2, 29, (13, 5, 9), 250);
        assert_eq!(format(&c, "%Y-%m-%d %H:%i:%s.%f"), "2024-02-29 13:05:09.000250");
        assert_eq!(
            format(&c, "%a %b %c %D %e %j %k %l %p %r %T %W %w %y %M %%"),
            "Thu Feb 2 29th 29 060 13 1 PM 01:05:09 PM 13:05:09 Thursday 4 24 February %"
        );
        assert_eq!(format(&at(2024, 1, 1, (0, 0, 0), 0), "%D %h %p"), "1st 12 AM");
        assert_eq!(format(&at(2024, 1, 12, (0, 0, 0), 0), "%D"), "12th");
        assert_eq!(format(&at(2024, 1, 22, (0, 0, 0), 0), "%D %q"), "22nd q");
        // Weeks, checked against MySQL 8: 2021-01-01 was a Friday.
        let c = at(2021, 1, 1, (0, 0, 0), 0);
        assert_eq!(format(&c, "%U %u %V %v %X %x"), "00 00 52 53 2020 2020");
        let c = at(2021, 1, 3, (0, 0, 0), 0);
        assert_eq!(format(&c, "%U %u %V %v %X %x"), "01 00 01 53 2021 2020");
        let c = at(2024, 12, 30, (0, 0, 0), 0);
        assert_eq!(format(&c, "%U %u %V %v %X %x"), "52 53 52 01 2024 2025");
    }
}
