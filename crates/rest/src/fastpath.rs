//! The usual `batch` body (pk-reads with filters, optionally readColumns
//! and operationId; strings without escapes; integer filter values) read by
//! a small parser made for that shape. serde_json's derived parsers spend
//! a fifth of the REST node's CPU on a lookup batch, mostly in their
//! general machinery (field-name dispatch, `Option` visitors). Anything
//! outside the shape (an escape, a float, a `null` where a field could be
//! left out, a `data` object, an unknown or repeated field, trailing text)
//! makes `parse_batch` return None, and the caller parses the body with
//! serde, which then also words any error. Where it answers, it answers
//! exactly what serde would (checked by the tests below).

use crate::json::Scalar;
use crate::pk::{BatchBody, BatchItem, Filter, Filters, OpBody, ReadColumn};
use std::borrow::Cow;
use std::sync::Arc;

pub fn parse_batch(text: &str) -> Option<BatchBody<'_>> {
    // The shortest filter, {"column":"k","value":1}, takes 25 bytes.
    let filters = Vec::with_capacity(text.len() / 25 + 1);
    let mut c = Cursor { text, at: 0, last_columns: None, filters };
    let mut operations = None;
    c.object(|c, key| match key {
        "operations" if operations.is_none() => {
            operations = Some(c.array(|c| c.item())?);
            Some(())
        }
        _ => None,
    })?;
    c.skip_space();
    (c.at == text.len()).then_some(())?;
    Some(BatchBody { operations: operations?, filters: c.filters })
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
    /// The text of the last `readColumns` array read and what it read as:
    /// an item whose array is the same text shares the list.
    last_columns: Option<(&'a str, Arc<[ReadColumn<'a>]>)>,
    /// Every filter read, in order (`BatchBody::filters`).
    filters: Vec<Filter<'a>>,
}

impl<'a> Cursor<'a> {
    fn skip_space(&mut self) {
        let bytes = self.text.as_bytes();
        while self.at < bytes.len() && matches!(bytes[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    /// The next byte after spaces, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.text.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A string without escapes or control characters, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let rest = &self.text.as_bytes()[start..];
        let len = rest.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        // Both ends are ASCII quotes: the slice is on character boundaries.
        self.text.get(start..start + len)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.text[self.at..].starts_with(word).then(|| self.at += word.len())
    }

    /// A filter value: a string, an integer, true, false or null.
    fn scalar(&mut self) -> Option<Scalar<'a>> {
        match self.peek()? {
            b'"' => Some(Scalar::Str(Cow::Borrowed(self.string()?))),
            b't' => self.literal("true").map(|_| Scalar::Bool(true)),
            b'f' => self.literal("false").map(|_| Scalar::Bool(false)),
            b'n' => self.literal("null").map(|_| Scalar::Null),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    /// An integer as serde_json reads it: non-negative ones as u64,
    /// negative ones as i64. Fractions, exponents, leading zeros, -0 and
    /// out-of-range values are left to serde_json.
    fn integer(&mut self) -> Option<Scalar<'a>> {
        let bytes = self.text.as_bytes();
        let negative = bytes[self.at] == b'-';
        let digits_from = self.at + negative as usize;
        let digits = bytes[digits_from..].iter().take_while(|b| b.is_ascii_digit()).count();
        let end = digits_from + digits;
        if digits == 0 || (bytes[digits_from] == b'0' && (digits > 1 || negative)) {
            return None;
        }
        if matches!(bytes.get(end), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let text = &self.text[self.at..end];
        let value = if negative { Scalar::Int(text.parse().ok()?) } else { Scalar::UInt(text.parse().ok()?) };
        self.at = end;
        Some(value)
    }

    /// An object: `field` reads the value of each key (and says None for a
    /// key it does not take, or takes a second time).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array<T>(&mut self, mut element: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut out = Vec::new();
        self.elements(|c| {
            out.push(element(c)?);
            Some(())
        })?;
        Some(out)
    }

    /// An array: `element` reads each element.
    fn elements(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            element(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A `filters` array, read into the batch's list.
    fn filters(&mut self) -> Option<Filters<'a>> {
        let start = self.filters.len();
        self.elements(|c| {
            let filter = c.filter()?;
            c.filters.push(filter);
            Some(())
        })?;
        let range = u32::try_from(start).ok()?..u32::try_from(self.filters.len()).ok()?;
        Some(Filters::InBatch(range))
    }

    fn item(&mut self) -> Option<BatchItem<'a>> {
        let (mut method, mut url, mut body) = (None, None, None);
        self.object(|c, key| {
            match key {
                "method" if method.is_none() => method = Some(c.string()?),
                "relative-url" if url.is_none() => url = Some(c.string()?),
                "body" if body.is_none() => body = Some(c.body()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(BatchItem { method: Some(Cow::Borrowed(method?)), relative_url: Cow::Borrowed(url?), body: body? })
    }

    fn body(&mut self) -> Option<OpBody<'a>> {
        let mut body = OpBody::default();
        self.object(|c, key| {
            match key {
                "filters" if body.filters.is_none() => body.filters = Some(c.filters()?),
                "readColumns" if body.read_columns.is_none() => body.read_columns = Some(c.read_columns()?),
                "operationId" if body.operation_id.is_none() => body.operation_id = Some(Cow::Borrowed(c.string()?)),
                _ => return None,
            }
            Some(())
        })?;
        Some(body)
    }

    /// An object of at most the fields `first` and `second`, each once.
    fn two_fields<A, B>(
        &mut self,
        (first, mut read_first): (&str, impl FnMut(&mut Self) -> Option<A>),
        (second, mut read_second): (&str, impl FnMut(&mut Self) -> Option<B>),
    ) -> Option<(Option<A>, Option<B>)> {
        let (mut a, mut b) = (None, None);
        self.object(|c, key| {
            if key == first && a.is_none() {
                a = Some(read_first(c)?);
            } else if key == second && b.is_none() {
                b = Some(read_second(c)?);
            } else {
                return None;
            }
            Some(())
        })?;
        Some((a, b))
    }

    fn filter(&mut self) -> Option<Filter<'a>> {
        let (column, value) = self.two_fields(("column", Self::string), ("value", Self::scalar))?;
        Some(Filter { column: Cow::Borrowed(column?), value: value? })
    }

    /// A `readColumns` array. An array of the same text as the last one
    /// reads as the same list, so it is shared rather than read again: the
    /// array ends where that text does, at its closing bracket.
    fn read_columns(&mut self) -> Option<Arc<[ReadColumn<'a>]>> {
        self.skip_space();
        if let Some((text, list)) = &self.last_columns {
            if self.text[self.at..].starts_with(text) {
                self.at += text.len();
                return Some(list.clone());
            }
        }
        let start = self.at;
        let list: Vec<ReadColumn<'a>> = self.array(|c| c.read_column())?;
        let list: Arc<[ReadColumn<'a>]> = list.into();
        self.last_columns = Some((&self.text[start..self.at], list.clone()));
        Some(list)
    }

    fn read_column(&mut self) -> Option<ReadColumn<'a>> {
        let (column, data_return_type) = self.two_fields(("column", Self::string), ("dataReturnType", Self::string))?;
        Some(ReadColumn { column: Cow::Borrowed(column?), data_return_type: data_return_type.map(Cow::Borrowed) })
    }
}

/// The batch's operations with their filters as lists, however read: the
/// fast path and serde read one body into the same text (the tests below
/// and the `rest_bodies` fuzz target compare them).
pub fn shown(batch: &BatchBody) -> String {
    let items: Vec<String> = batch
        .operations
        .iter()
        .map(|item| {
            let filters = item.body.filters.as_ref().map(|f| f.get(&batch.filters));
            let body = &item.body;
            format!(
                "{:?} {} filters {filters:?} readColumns {:?} operationId {:?} data {:?}",
                item.method, item.relative_url, body.read_columns, body.operation_id, body.data
            )
        })
        .collect();
    items.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde(text: &str) -> Option<String> {
        serde_json::from_str::<BatchBody>(text).ok().map(|b| shown(&b))
    }

    #[test]
    fn answers_as_serde_does_or_not_at_all() {
        let item = r#"{"method":"POST","relative-url":"db/t/pk-read","body":{"filters":[{"column":"id","value":7}]}}"#;
        let batch = |items: &str| format!(r#"{{"operations":[{items}]}}"#);
        let taken = [
            batch(item),
            batch(&[item, item, item].join(",")),
            batch(""),
            format!(" \n{{ \"operations\" : [ {item} ] }}\t"),
            batch(
                r#"{"body":{"filters":[{"value":-12,"column":"k"}],"operationId":"x1"},"relative-url":"d/t/pk-read","method":"POST"}"#,
            ),
            batch(
                r#"{"method":"POST","relative-url":"d/t/pk-read","body":{"filters":[{"column":"a","value":"é ü"},{"column":"b","value":0}],"readColumns":[{"column":"c"},{"column":"d","dataReturnType":"default"}]}}"#,
            ),
            batch(
                r#"{"method":"GET","relative-url":"d/t/pk-read","body":{"filters":[{"column":"a","value":true},{"column":"b","value":null},{"column":"c","value":18446744073709551615},{"column":"d","value":-9223372036854775808}]}}"#,
            ),
            batch(r#"{"method":"POST","relative-url":"d/t/pk-read","body":{}}"#),
        ];
        for text in &taken {
            let fast = parse_batch(text).map(|b| shown(&b));
            assert!(fast.is_some(), "the fast path should take {text}");
            assert_eq!(fast, serde(text), "{text}");
        }
        // Left to serde: it either reads them (floats, escapes, nulls for
        // absent fields, pk-write data) or words the error.
        let left = [
            batch(&item.replace("7", "7.5")),
            batch(&item.replace("7", "1e3")),
            batch(&item.replace("7", "07")),
            batch(&item.replace("7", "-0")),
            batch(&item.replace("7", "18446744073709551616")),
            batch(&item.replace("7", "-9223372036854775809")),
            batch(&item.replace("id", "i\\u0064")),
            batch(&item.replace("\"filters\"", "\"readColumns\":null,\"filters\"")),
            batch(&item.replace("\"filters\"", "\"data\":{\"a\":1},\"filters\"")),
            batch(&item.replace("\"method\":\"POST\",", "\"method\":\"POST\",\"method\":\"POST\",")),
            batch(&item.replace("\"method\":\"POST\",", "\"extra\":1,\"method\":\"POST\",")),
            batch(&item.replace("\"method\":\"POST\",", "")),
            batch(&item.replace("7", "[7]")),
            format!("{} x", batch(item)),
            batch(item).replace("]}", "],}"),
            batch(&format!("{item},")),
            batch(item)[..40].to_string(),
            "{\"operations\":[{\"method\":\"PO\u{1}ST\"}]}".to_string(),
            String::new(),
        ];
        for text in &left {
            assert_eq!(parse_batch(text).map(|b| shown(&b)), None, "{text}");
        }
    }

    #[test]
    fn items_with_the_same_read_columns_text_share_one_list() {
        let item = |columns: &str| {
            format!(
                r#"{{"method":"POST","relative-url":"d/t/pk-read","body":{{"filters":[{{"column":"id","value":1}}],"readColumns":{columns}}}}}"#
            )
        };
        let (ab, a) = (r#"[{"column":"a"},{"column":"b"}]"#, r#"[{"column":"a"}]"#);
        let text = format!(r#"{{"operations":[{},{},{},{}]}}"#, item(ab), item(ab), item(a), item(ab));
        let batch = parse_batch(&text).expect("the fast path takes it");
        let lists: Vec<&Arc<[ReadColumn]>> =
            batch.operations.iter().map(|o| o.body.read_columns.as_ref().expect("listed")).collect();
        assert!(Arc::ptr_eq(lists[0], lists[1]));
        assert!(!Arc::ptr_eq(lists[1], lists[2]));
        assert_eq!(lists[2].len(), 1);
        assert_eq!(format!("{:?}", lists[3]), format!("{:?}", lists[0]));
        assert_eq!(Some(shown(&batch)), serde(&text));
    }
}
