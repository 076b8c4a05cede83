//! Building Prometheus metric families by hand from counters read at scrape time: a family
//! per metric name, one sample per label set, histograms from per-bucket counts.

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

/// One metric family being filled.
pub struct Family {
    mf: MetricFamily,
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name((*k).to_string());
            l.set_value((*v).to_string());
            l
        })
        .collect()
}

impl Family {
    fn new(name: &str, help: &str, t: MetricType) -> Family {
        let mut mf = MetricFamily::default();
        mf.set_name(name.to_string());
        mf.set_help(help.to_string());
        mf.set_field_type(t);
        Family { mf }
    }

    /// A counter family (`name` ends in `_total`).
    pub fn counter(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::COUNTER)
    }

    /// A gauge family.
    pub fn gauge(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::GAUGE)
    }

    /// A histogram family.
    pub fn histogram(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::HISTOGRAM)
    }

    /// One sample of a counter or gauge family.
    pub fn add(&mut self, pairs: &[(&str, &str)], value: f64) {
        let mut m = Metric::from_label(labels(pairs));
        match self.mf.get_field_type() {
            MetricType::COUNTER => {
                let mut c = Counter::default();
                c.set_value(value);
                m.set_counter(c);
            }
            _ => {
                let mut g = Gauge::default();
                g.set_value(value);
                m.set_gauge(g);
            }
        }
        self.mf.mut_metric().push(m);
    }

    /// One histogram: `counts[i]` observations in bucket `i` (not cumulative; the last is
    /// +Inf), upper bounds `bounds` in the histogram's unit, and the sum of observations.
    pub fn add_histogram(
        &mut self,
        pairs: &[(&str, &str)],
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) {
        let mut h = Histogram::default();
        let mut cumulative = 0u64;
        let mut buckets = Vec::with_capacity(bounds.len());
        for (i, &b) in bounds.iter().enumerate() {
            cumulative += counts.get(i).copied().unwrap_or(0);
            let mut bk = Bucket::default();
            bk.set_upper_bound(b);
            bk.set_cumulative_count(cumulative);
            buckets.push(bk);
        }
        let total: u64 = counts.iter().sum();
        h.set_bucket(buckets);
        h.set_sample_count(total);
        h.set_sample_sum(sum);
        let mut m = Metric::from_label(labels(pairs));
        m.set_histogram(h);
        self.mf.mut_metric().push(m);
    }

    /// The finished family (`None` when it has no samples: Prometheus wants none empty).
    pub fn done(self) -> Option<MetricFamily> {
        (!self.mf.get_metric().is_empty()).then_some(self.mf)
    }
}
