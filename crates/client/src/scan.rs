//! Read-committed scans along ordered indexes, with filters, projections and
//! aggregates computed on the data nodes. Every partition is scanned in
//! parallel, page by page.

use crate::ops::Row;
use crate::{Client, Table};
use latsdb_types::expr::{Aggregate, Expr};
use latsdb_types::keycodec;
use latsdb_types::proto::{ClientRequest, ClientResponse, KeyBound, ScanPage, ScanRequest};
use latsdb_types::row::RowLayout;
use latsdb_types::schema::{ColumnId, PRIMARY_INDEX};
use latsdb_types::ErrorCode;
use latsdb_types::{DbError, Result, Value};
use std::ops::Bound;
use std::sync::Arc;

const DEFAULT_PAGE_ROWS: u32 = 4096;

#[derive(Clone, Debug)]
pub struct Scan {
    index: Option<String>,
    lower: Bound<Vec<Value>>,
    upper: Bound<Vec<Value>>,
    filter: Option<Expr>,
    columns: Option<Vec<String>>,
    limit: Option<usize>,
    ordered: bool,
    page_rows: u32,
}

impl Default for Scan {
    fn default() -> Self {
        Scan {
            index: None,
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
            filter: None,
            columns: None,
            limit: None,
            ordered: false,
            page_rows: DEFAULT_PAGE_ROWS,
        }
    }
}

impl Scan {
    /// Every row of the table (along the primary key).
    pub fn all() -> Scan {
        Scan::default()
    }

    /// Scan along the named ordered index ("PRIMARY" is the primary key's).
    pub fn index(mut self, name: &str) -> Scan {
        self.index = Some(name.to_string());
        self
    }

    /// Bounds on the index columns (a bound may give a prefix of them).
    pub fn range(mut self, lower: Bound<Vec<Value>>, upper: Bound<Vec<Value>>) -> Scan {
        self.lower = lower;
        self.upper = upper;
        self
    }

    /// Rows whose index columns start with `prefix`.
    pub fn equal(self, prefix: Vec<Value>) -> Scan {
        self.range(Bound::Included(prefix.clone()), Bound::Included(prefix))
    }

    /// Only rows for which `filter` is true cross the wire.
    pub fn filter(mut self, filter: Expr) -> Scan {
        self.filter = Some(filter);
        self
    }

    pub fn columns(mut self, names: &[&str]) -> Scan {
        self.columns = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }

    pub fn limit(mut self, rows: usize) -> Scan {
        self.limit = Some(rows);
        self
    }

    /// Return rows in index order (merged across partitions).
    pub fn ordered(mut self) -> Scan {
        self.ordered = true;
        self
    }

    pub fn page_rows(mut self, rows: u32) -> Scan {
        self.page_rows = rows.max(1);
        self
    }
}

struct Plan {
    request: ScanRequest,
    layout: Arc<RowLayout>,
    index_columns: Vec<ColumnId>,
    projection: Option<Vec<ColumnId>>,
}

fn bound(columns: &[&latsdb_types::ColumnDef], b: &Bound<Vec<Value>>) -> Result<KeyBound> {
    Ok(match b {
        Bound::Unbounded => KeyBound::Unbounded,
        Bound::Included(v) => KeyBound::Included(keycodec::encode_prefix(columns, v)?),
        Bound::Excluded(v) => KeyBound::Excluded(keycodec::encode_prefix(columns, v)?),
    })
}

impl Client {
    fn plan(&self, table: &Arc<Table>, scan: &Scan, aggregates: Vec<Aggregate>) -> Result<Plan> {
        let def = table.def();
        let index = match &scan.index {
            Some(name) => def.index(name)?.clone(),
            None => def
                .index_by_id(PRIMARY_INDEX)
                .cloned()
                .ok_or_else(|| DbError::internal("table has no PRIMARY index"))?,
        };
        let columns: Vec<_> = index.columns.iter().map(|&c| &def.columns[c as usize]).collect();
        if let Some(f) = &scan.filter {
            f.validate(def.columns.len())?;
        }
        let projection = match &scan.columns {
            Some(names) => Some(names.iter().map(|n| table.column(n)).collect::<Result<Vec<_>>>()?),
            None => None,
        };
        let layout = match &projection {
            Some(ids) => Arc::new(table.meta.layout.projection(ids)),
            None => table.layout.clone(),
        };
        Ok(Plan {
            request: ScanRequest {
                table: def.id,
                table_version: def.version,
                partition: 0,
                index: index.id,
                lower: bound(&columns, &scan.lower)?,
                upper: bound(&columns, &scan.upper)?,
                resume_after: None,
                filter: scan.filter.clone(),
                projection: projection.clone(),
                // A partition never needs to send more than the limit.
                max_rows: scan
                    .limit
                    .map_or(scan.page_rows, |l| scan.page_rows.min(l.clamp(1, u32::MAX as usize) as u32)),
                aggregates,
            },
            layout,
            index_columns: index.columns.clone(),
            projection,
        })
    }

    /// Scans every partition in parallel, page by page, handing each page
    /// to `on_page`, which says whether to go on.
    async fn scan_partitions(
        &self,
        plan: &Plan,
        partitions: u32,
        mut on_page: impl FnMut(ScanPage) -> Result<bool>,
    ) -> Result<()> {
        let mut inflight = std::collections::VecDeque::new();
        for p in 0..partitions {
            let mut req = plan.request.clone();
            req.partition = p;
            let rx = self.start_page(&req).await;
            inflight.push_back((req, rx));
        }
        while let Some((mut req, rx)) = inflight.pop_front() {
            let page = self.answer(&req, rx).await?;
            let resume = page.resume.clone();
            if !on_page(page)? {
                return Ok(());
            }
            if let Some(r) = resume {
                req.resume_after = Some(r);
                let rx = self.start_page(&req).await;
                inflight.push_back((req, rx));
            }
        }
        Ok(())
    }

    /// The page a request in flight answers; asked again by a fresh layout
    /// when its node failed or its partition moved.
    async fn answer(&self, req: &ScanRequest, rx: Result<PageReceiver>) -> Result<ScanPage> {
        let answer = match rx {
            Ok(rx) => self.finish(rx).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(ClientResponse::Scan(page)) => Ok(page),
            Ok(ClientResponse::Error(e)) | Err(e) if is_stale(&e) => self.page_again(req).await,
            Ok(ClientResponse::Error(e)) | Err(e) => Err(e),
            Ok(other) => Err(DbError::internal(format!("a scan was answered with {other:?}"))),
        }
    }

    async fn start_page(&self, req: &ScanRequest) -> Result<PageReceiver> {
        self.start(self.scan_route(req.partition)?, &ClientRequest::Scan(req.clone())).await
    }

    /// A page is a read: when its node failed or the layout moved its
    /// partition, it is asked again by the new layout.
    async fn page_again(&self, req: &ScanRequest) -> Result<ScanPage> {
        let mut last = None;
        for attempt in 0..crate::ops::STALE_LAYOUT_RETRIES {
            tokio::time::sleep(std::time::Duration::from_millis(50 * (attempt as u64 + 1))).await;
            let _ = self.refresh_layout().await;
            let answer = match self.start_page(req).await {
                Ok(rx) => self.finish(rx).await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(ClientResponse::Scan(page)) => return Ok(page),
                Ok(ClientResponse::Error(e)) | Err(e) if is_stale(&e) => last = Some(e),
                Ok(ClientResponse::Error(e)) | Err(e) => return Err(e),
                Ok(other) => return Err(DbError::internal(format!("a scan was answered with {other:?}"))),
            }
        }
        Err(last.unwrap_or_else(|| DbError::internal("a scan page was retried without an error")))
    }

    /// Rows matching the scan. The filter runs on the data nodes.
    pub async fn scan(&self, table: &Arc<Table>, scan: Scan) -> Result<Vec<Row>> {
        let plan = self.plan(table, &scan, Vec::new())?;
        let partitions = table.def().partitions;
        if let (true, Some(limit)) = (scan.ordered, scan.limit) {
            return self.merge_ordered(plan, partitions, limit, scan.page_rows).await;
        }
        let mut rows: Vec<Row> = Vec::new();
        self.scan_partitions(&plan, partitions, |page| {
            for bytes in page.rows {
                rows.push(Row::new(plan.layout.clone(), bytes.into_vec())?);
                if scan.limit.is_some_and(|l| rows.len() >= l) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await?;
        if scan.ordered {
            let positions = order_positions(&plan)?;
            let mut keyed: Vec<(Vec<u8>, Row)> =
                rows.into_iter().map(|row| (order_key(&row, &positions), row)).collect();
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            rows = keyed.into_iter().map(|(_, r)| r).collect();
        }
        Ok(rows)
    }

    /// Asks a merged partition whose rows ran out for its next page (twice
    /// as many rows as the last, at most `most`), until it sends rows or
    /// has no more.
    async fn refill(
        &self,
        source: &mut MergeSource,
        layout: &Arc<RowLayout>,
        positions: &[OrderPosition],
        most: u32,
    ) -> Result<()> {
        while source.rows.is_empty() {
            let Some(resume) = source.resume.take() else { return Ok(()) };
            source.req.resume_after = Some(resume);
            source.req.max_rows = source.req.max_rows.saturating_mul(2).min(most).max(1);
            let rx = self.start_page(&source.req).await;
            let page = self.answer(&source.req, rx).await?;
            source.take(page, layout, positions)?;
        }
        debug_assert!(
            source.resume.is_none() || !source.rows.is_empty(),
            "a partition with more rows has none buffered"
        );
        Ok(())
    }

    /// An ordered scan with a limit: a merge of the partitions' rows, which
    /// each partition sends in index order. Every partition is first asked
    /// for a little more than its share of the limit, all at once; a
    /// partition whose rows run out while the merge still needs rows and
    /// it has more is asked again (twice as many each time), since its next
    /// row may come first. About `limit` rows cross the wire instead of
    /// `partitions x limit`.
    async fn merge_ordered(&self, plan: Plan, partitions: u32, limit: usize, page_rows: u32) -> Result<Vec<Row>> {
        let mut out = Vec::with_capacity(limit.min(1 << 16));
        if limit == 0 {
            return Ok(out);
        }
        let positions = order_positions(&plan)?;
        let first_rows = first_page_rows(limit, partitions, page_rows);
        let mut inflight = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            let mut req = plan.request.clone();
            req.partition = p;
            req.max_rows = first_rows;
            let rx = self.start_page(&req).await;
            inflight.push((req, rx));
        }
        let mut sources = Vec::with_capacity(partitions as usize);
        let mut heads = std::collections::BinaryHeap::new();
        for (req, rx) in inflight {
            let page = self.answer(&req, rx).await?;
            let mut source = MergeSource { req, rows: std::collections::VecDeque::new(), resume: None };
            source.take(page, &plan.layout, &positions)?;
            self.refill(&mut source, &plan.layout, &positions, page_rows).await?;
            if let Some((key, row)) = source.rows.pop_front() {
                heads.push(std::cmp::Reverse(Head { key, partition: sources.len(), row }));
            }
            sources.push(source);
        }
        while out.len() < limit {
            let Some(std::cmp::Reverse(head)) = heads.pop() else { break };
            out.push(head.row);
            let source = &mut sources[head.partition];
            if out.len() < limit {
                let wanted = (limit - out.len()).min(u32::MAX as usize) as u32;
                self.refill(source, &plan.layout, &positions, page_rows.min(wanted)).await?;
            }
            if let Some((key, row)) = source.rows.pop_front() {
                debug_assert!(key >= head.key, "a partition sent rows out of index order");
                heads.push(std::cmp::Reverse(Head { key, partition: head.partition, row }));
            }
        }
        debug_assert!(out.len() <= limit);
        Ok(out)
    }

    /// Aggregates over the rows matching the scan, computed on the data nodes.
    pub async fn aggregate(&self, table: &Arc<Table>, scan: Scan, aggregates: &[Aggregate]) -> Result<Vec<Value>> {
        if aggregates.is_empty() {
            return Err(DbError::bad_request("name at least one aggregate"));
        }
        for a in aggregates {
            if let Some(c) = a.column() {
                if c as usize >= table.def().columns.len() {
                    return Err(DbError::bad_request(format!(
                        "aggregate names column number {c}, which does not exist"
                    )));
                }
            }
        }
        let plan = self.plan(table, &scan, aggregates.to_vec())?;
        let mut acc: Vec<Value> = aggregates.iter().map(|a| a.initial()).collect();
        self.scan_partitions(&plan, table.def().partitions, |page| {
            if page.aggregates.len() != aggregates.len() {
                return Err(DbError::internal("a partition returned the wrong number of aggregates"));
            }
            for ((a, slot), partial) in aggregates.iter().zip(acc.iter_mut()).zip(page.aggregates) {
                a.merge(slot, partial);
            }
            Ok(true)
        })
        .await?;
        Ok(acc)
    }
}

/// Rows a partition sent that the merge has not used yet, each with its
/// index key, and where the partition goes on.
struct MergeSource {
    req: ScanRequest,
    rows: std::collections::VecDeque<(Vec<u8>, Row)>,
    resume: Option<Vec<u8>>,
}

impl MergeSource {
    fn take(&mut self, page: ScanPage, layout: &Arc<RowLayout>, positions: &[OrderPosition]) -> Result<()> {
        for bytes in page.rows {
            let row = Row::new(layout.clone(), bytes.into_vec())?;
            let key = order_key(&row, positions);
            self.rows.push_back((key, row));
        }
        self.resume = page.resume;
        Ok(())
    }
}

/// The next row of one partition in the merge, ordered by its index key
/// (then partition, so equal keys come out in a fixed order).
struct Head {
    key: Vec<u8>,
    partition: usize,
    row: Row,
}

impl PartialEq for Head {
    fn eq(&self, other: &Head) -> bool {
        (&self.key, self.partition) == (&other.key, other.partition)
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Head) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Head) -> std::cmp::Ordering {
        (&self.key, self.partition).cmp(&(&other.key, other.partition))
    }
}

/// Rows each partition is first asked for by an ordered scan with a limit:
/// half again its share of the limit plus two (the rows of a range spread
/// over the partitions by hash, unevenly), never more than the limit.
fn first_page_rows(limit: usize, partitions: u32, page_rows: u32) -> u32 {
    let share = limit.saturating_mul(3) / (2 * partitions.max(1) as usize) + 2;
    share.min(limit).min(page_rows as usize).max(1) as u32
}

type PageReceiver = tokio::sync::oneshot::Receiver<Result<crate::Reply>>;

/// Errors after which a read may be sent again by a fresh layout.
fn is_stale(e: &DbError) -> bool {
    matches!(e.code, ErrorCode::NodeUnavailable | ErrorCode::WrongShard | ErrorCode::NotServing)
}

/// Where an index column is in the returned rows, and its type.
type OrderPosition = (usize, latsdb_types::ColumnType, latsdb_types::Collation);

/// A row's index key (memcomparable), for ordering rows across partitions.
fn order_key(row: &Row, positions: &[OrderPosition]) -> Vec<u8> {
    let mut key = Vec::new();
    for &(pos, ty, collation) in positions {
        keycodec::encode_value(&mut key, ty, collation, &row.get(pos));
    }
    key
}

/// Positions (in the returned rows) and types of the index columns, for
/// ordering rows across partitions.
fn order_positions(plan: &Plan) -> Result<Vec<OrderPosition>> {
    let position = |c: ColumnId| -> Option<usize> {
        match &plan.projection {
            None => Some(c as usize),
            Some(p) => p.iter().position(|&x| x == c),
        }
    };
    let mut out = Vec::new();
    for &c in &plan.index_columns {
        let pos = position(c).ok_or_else(|| {
            DbError::bad_request("an ordered scan must return the index's columns; add them to columns()")
        })?;
        let column = &plan.layout.columns()[pos];
        out.push((pos, column.ty, column.collation));
    }
    Ok(out)
}
