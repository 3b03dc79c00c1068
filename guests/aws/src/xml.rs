//! Reading the Query API's XML answers: elements by local name (EC2 and ELBv2 put theirs in
//! different namespaces, which say nothing this provider needs), their text, and the lists
//! both services use (`<item>` in EC2, `<member>` in ELBv2).

use roxmltree::Node;

/// Lookups on an element of an answer.
pub trait Element<'a> {
    /// The first child element named `name`.
    fn child(&self, name: &str) -> Option<Node<'a, 'a>>;
    /// The text of the first child element named `name`, if it has any.
    fn text_of(&self, name: &str) -> Option<&'a str>;
    /// The text of the child `name` as an owned string, empty when absent.
    fn string(&self, name: &str) -> String;
    /// The elements of the list child `name` (its `item` or `member` children).
    fn list(&self, name: &str) -> Vec<Node<'a, 'a>>;
    /// The first element named `name` anywhere below this one, depth first.
    fn find(&self, name: &str) -> Option<Node<'a, 'a>>;
}

impl<'a> Element<'a> for Node<'a, 'a> {
    fn child(&self, name: &str) -> Option<Node<'a, 'a>> {
        self.children()
            .find(|node| node.is_element() && node.tag_name().name() == name)
    }

    fn text_of(&self, name: &str) -> Option<&'a str> {
        self.child(name).and_then(|node| node.text())
    }

    fn string(&self, name: &str) -> String {
        self.text_of(name).unwrap_or_default().to_string()
    }

    fn list(&self, name: &str) -> Vec<Node<'a, 'a>> {
        self.child(name)
            .map(|list| {
                list.children()
                    .filter(|node| {
                        node.is_element() && matches!(node.tag_name().name(), "item" | "member")
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn find(&self, name: &str) -> Option<Node<'a, 'a>> {
        self.descendants()
            .find(|node| node.is_element() && node.tag_name().name() == name)
    }
}

/// The tags of an element's `tagSet` (EC2) or `Tags` (ELBv2) list as (key, value) pairs.
pub fn tags<'a>(node: &Node<'a, 'a>, list: &str) -> Vec<(String, String)> {
    node.list(list)
        .iter()
        .map(|tag| {
            let key = tag.text_of("key").or_else(|| tag.text_of("Key"));
            let value = tag.text_of("value").or_else(|| tag.text_of("Value"));
            (
                key.unwrap_or_default().to_string(),
                value.unwrap_or_default().to_string(),
            )
        })
        .collect()
}
